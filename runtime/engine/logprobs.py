"""Token logprobs for the API: the model's raw softmax at sampled and prompt positions.

What is reported is ``log_softmax`` of the target model's logits row at temperature 1,
before penalties, truncation (top-k, top-p, min-p) and temperature: the model's own
distribution, the same at any sampling setting (``runtime/kernels/logprobs.py``). Under
speculative decoding the rows are the target's, from the verification pass, so drafting
changes nothing here.

Entries cross the pipe, so they carry each token's text as bytes (the service has no
tokenizer): ``piece`` is what the token adds to the text, or the special token's own
spelling (``<|im_end|>``) with ``in_text`` False.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the worker computes entries; the service only reads them (and loads no numpy)
    import numpy as np


@dataclass(slots=True)
class TokenLogprob:
    """One token's logprob; ``logprob`` is None for a prompt's first token (nothing predicts it).

    ``top``: the most likely tokens at that position, ``(token id, piece, logprob)``, most
    likely first.
    """

    token: int
    piece: bytes
    in_text: bool
    logprob: float | None
    top: list[tuple[int, bytes, float]] = field(default_factory=list)


class Logprobs:
    """Builds entries from the backend's logits rows; caches token pieces."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self._pieces: dict[int, tuple[bytes, bool]] = {}

    def piece(self, token: int) -> tuple[bytes, bool]:
        hit = self._pieces.get(token)
        if hit is None:
            raw = self.backend.token_bytes(token)
            # special tokens add nothing to the text: name them by their own spelling
            hit = (raw, True) if raw else (self.backend.token_text(token).encode(), False)
            self._pieces[token] = hit
        return hit

    def entry(self, row: np.ndarray, token: int, n_top: int) -> TokenLogprob:
        """The entry of ``token`` sampled (or read) from logits ``row`` (float [V])."""
        from runtime.kernels.logprobs import row_logprobs

        r = row_logprobs(row, token, n_top)
        piece, in_text = self.piece(token)
        top = [(int(t), self.piece(int(t))[0], float(lp)) for t, lp in zip(r.top_ids, r.top_logprobs)]
        return TokenLogprob(token, piece, in_text, r.logprob, top)

    def first(self, token: int) -> TokenLogprob:
        piece, in_text = self.piece(token)
        return TokenLogprob(token, piece, in_text, None)

    def prompt(self, request, start: int, end: int, first_index: int, sent: int) -> list[TokenLogprob]:
        """Entries of the prompt tokens that rows ``start..end-1`` (batch indices from
        ``first_index``) predict, skipping the first ``sent`` prompt tokens (already sent).

        Row ``p`` predicts token ``p + 1``; token 0 gets a None entry with the first chunk.
        """
        tokens, n = request.tokens, request.params.top_logprobs
        out: list[TokenLogprob] = []
        if start == 0 and sent == 0:
            out.append(self.first(tokens[0]))
        for p in range(max(start, sent - 1), min(end, request.prompt_len - 1)):
            out.append(self.entry(self.backend.logits(first_index + p - start), tokens[p + 1], n))
        return out
