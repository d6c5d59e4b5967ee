"""Measured costs of speculative steps, and the choice of K per request.

The engine reports the wall time of every target decode (with the number of tokens in its
batch) and of every draft pass. The target's cost is fitted as ``T(n) = a + b n`` over
recent decode-sized batches (exponentially decayed least squares); the draft's as the
mean seconds per pass. With a request's acceptance rate ``alpha``, K is the value that
maximises ``E[tokens](alpha, K) / (K * draft + T(N (K + 1)))`` (Leviathan et al.), and
drafting pays only when that beats ``1 / T(N)``.
"""

from __future__ import annotations

from runtime.kernels.speculative import choose_k

K_MAX = 8
#: batches larger than this are prompt chunks, whose cost per token says nothing of decode
_DECODE_TOKENS = 96
_DECAY = 0.97
#: until the fit has seen batches of different sizes: each extra token costs this share of a pass
_SLOPE_PRIOR = 0.05


class SpecCosts:
    def __init__(self) -> None:
        self._w = self._sn = self._st = self._snn = self._snt = 0.0
        self.draft_pass: float | None = None
        #: seconds of verification work (target distributions, acceptance) per logits row
        self.verify_row = 0.0

    def observe_target(self, n_tokens: int, seconds: float) -> None:
        if n_tokens > _DECODE_TOKENS:
            return
        d = _DECAY
        self._w = self._w * d + 1
        self._sn = self._sn * d + n_tokens
        self._st = self._st * d + seconds
        self._snn = self._snn * d + n_tokens * n_tokens
        self._snt = self._snt * d + n_tokens * seconds

    def observe_draft(self, passes: int, seconds: float) -> None:
        if passes <= 0:
            return
        per = seconds / passes
        self.draft_pass = per if self.draft_pass is None else 0.8 * self.draft_pass + 0.2 * per

    def observe_verify(self, rows: int, seconds: float) -> None:
        if rows > 0:
            self.verify_row = 0.8 * self.verify_row + 0.2 * seconds / rows

    @property
    def known(self) -> bool:
        return self._w >= 2 and self.draft_pass is not None

    def target(self, n_tokens: int) -> float:
        """Fitted seconds of one target pass over ``n_tokens`` tokens."""
        w = self._w
        mean_n, mean_t = self._sn / w, self._st / w
        var = self._snn / w - mean_n * mean_n
        if var > 0.25:
            b = (self._snt / w - mean_n * mean_t) / var
            a = mean_t - b * mean_n
            if a > 0 and b >= 0:
                return a + b * n_tokens
        a = mean_t / (1 + _SLOPE_PRIOR * mean_n)
        return a * (1 + _SLOPE_PRIOR * n_tokens)

    def choose(self, alpha: float, n_decoding: int, k_max: int = K_MAX,
               lookup_only: bool = False) -> tuple[int, float]:
        """``(K, expected speedup)`` for a request at acceptance ``alpha`` while
        ``n_decoding`` requests decode in each step; ``lookup_only``: the drafts come from
        prompt lookup, which costs nothing per drafted token."""
        n = max(1, n_decoding)
        verify = [self.target(n * (k + 1)) + n * (k + 1) * self.verify_row for k in range(k_max + 1)]
        draft = 0.0 if lookup_only else self.draft_pass or 0.0
        return choose_k(alpha, draft, verify, self.target(n), k_max)
