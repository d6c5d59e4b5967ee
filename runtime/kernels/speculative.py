"""Speculative decoding: the target's sampling distribution, and exact verification of drafts.

A draft proposes ``K`` tokens ``x_1..x_K`` sampled from its distributions ``q_1..q_K``; the
target computes its distributions ``p_1..p_{K+1}`` in one pass. Verification (Leviathan et
al. 2023, arXiv 2211.17192; Chen et al. 2023, arXiv 2302.01318):

- accept ``x_k`` with probability ``min(1, p_k(x_k) / q_k(x_k))``, in order;
- at the first rejection, emit a token drawn from ``normalize(max(p_k - q_k, 0))`` and stop;
- when all ``K`` pass, emit a bonus token drawn from ``p_{K+1}``.

Every emitted token is then distributed exactly as the target alone would sample it.
Greedy decoding is the one-hot case: accept while ``x_k == argmax p_k``, then emit the
target's argmax.

Distributions come from :func:`candidates`, which applies the same transforms as the
engine's native sampler chain (penalties, top-k, top-p, min-p, temperature) to a logits
row, truncating first so the rest is O(k) numpy work. Sparse distributions over different
token sets are brought onto one dense local support with :func:`dense_support`.

Pure numpy; every random draw comes from the ``numpy.random.Generator`` passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np


class Transforms(Protocol):
    """The sampling settings read here (``runtime.sampling_params.SamplingParams`` fits)."""

    temperature: float
    top_k: int
    top_p: float
    min_p: float
    repeat_penalty: float
    presence_penalty: float
    frequency_penalty: float
    penalty_last_n: int


@dataclass(slots=True)
class Candidates:
    """A sparse distribution: ``probs[i]`` is the probability of token ``ids[i]``.

    ``ids``: int64 [n], distinct; ``probs``: float64 [n], summing to 1.
    """

    ids: np.ndarray
    probs: np.ndarray

    def prob_of(self, token: int) -> float:
        hit = np.nonzero(self.ids == token)[0]
        return float(self.probs[hit[0]]) if hit.size else 0.0


def has_penalties(t: Transforms) -> bool:
    return t.repeat_penalty != 1.0 or t.frequency_penalty != 0.0 or t.presence_penalty != 0.0


def apply_penalties(logits: np.ndarray, history: Sequence[int], t: Transforms) -> np.ndarray:
    """Repeat / frequency / presence penalties over the last ``penalty_last_n`` of ``history``.

    ``logits``: float32 [V] (not modified); returns a penalized copy [V]. As llama.cpp: a
    positive logit is divided by ``repeat_penalty``, a negative one multiplied, then
    ``count * frequency + presence`` is subtracted.
    """
    if not has_penalties(t) or t.penalty_last_n == 0 or len(history) == 0:
        return logits
    window = np.asarray(history[-t.penalty_last_n:] if t.penalty_last_n > 0 else history, dtype=np.int64)
    ids, counts = np.unique(window, return_counts=True)
    out = np.array(logits, dtype=np.float32, copy=True)
    v: np.ndarray = out[ids]
    v = np.where(v <= 0, v * t.repeat_penalty, v / t.repeat_penalty)
    v = v - counts * t.frequency_penalty - t.presence_penalty
    out[ids] = v
    return out


def candidates(logits: np.ndarray, t: Transforms, history: Sequence[int] = ()) -> Candidates:
    """The distribution a request samples its next token from.

    ``logits``: float32 [V] (one output row of the model); ``history``: the request's
    tokens so far (for penalties). The transforms run in the native chain's order:
    penalties, top-k, top-p, min-p, temperature (top-p and min-p see the logits at
    temperature 1, as in that chain). ``temperature <= 0`` gives the one-hot argmax.
    """
    logits = apply_penalties(logits, history, t)
    if t.temperature <= 0.0:
        top = int(np.argmax(logits))
        return Candidates(np.array([top], dtype=np.int64), np.ones(1))
    n_vocab = logits.shape[0]
    if 0 < t.top_k < n_vocab:
        ids = np.argpartition(logits, n_vocab - t.top_k)[n_vocab - t.top_k:]
    else:
        ids = np.arange(n_vocab)
    z = logits[ids].astype(np.float64)
    order = np.argsort(-z, kind="stable")
    ids, z = ids[order].astype(np.int64), z[order]
    if t.top_p < 1.0:
        p = np.exp(z - z[0])
        p /= p.sum()
        keep = int(np.searchsorted(np.cumsum(p), t.top_p) + 1)  # first index where cum >= top_p
        ids, z = ids[:keep], z[:keep]
    if t.min_p > 0.0:
        keep = max(1, int(np.count_nonzero(z >= z[0] + np.log(t.min_p))))
        ids, z = ids[:keep], z[:keep]
    z = z / t.temperature
    p = np.exp(z - z[0])
    return Candidates(ids, p / p.sum())


def dense_support(dists: Sequence[Candidates], extra: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
    """Put sparse distributions on one dense local support.

    Returns ``(ids, dense)``: ``ids`` int64 [U] the union of all token ids (and ``extra``),
    sorted; ``dense`` float64 [len(dists), U] with ``dense[i, j]`` the probability of
    ``ids[j]`` under ``dists[i]``.
    """
    ids = np.unique(np.concatenate([d.ids for d in dists] + [np.asarray(extra, dtype=np.int64)]))
    dense = np.zeros((len(dists), ids.size))
    for i, d in enumerate(dists):
        dense[i, np.searchsorted(ids, d.ids)] = d.probs
    return ids, dense


def sample(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Inverse-CDF draws: ``probs`` float [..., U] (rows sum to 1) -> int64 [...] indices."""
    cdf = np.cumsum(probs, axis=-1)
    u = rng.random(probs.shape[:-1]) * cdf[..., -1]
    idx = (cdf <= u[..., None]).sum(axis=-1)
    return np.minimum(idx, probs.shape[-1] - 1).astype(np.int64)


def verify(p: np.ndarray, q: np.ndarray, draft: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Exact rejection sampling of drafted tokens, batched over a leading dimension.

    ``p``: float [B, K+1, U], the target's distributions at each drafted position and the
    bonus position; ``q``: float [B, K, U], the draft's distributions the drafts were
    sampled from; ``draft``: int [B, K], the drafted tokens (indices into U).

    Returns ``(n_accepted, token)``, both int64 [B]: how many drafts are accepted
    (0..K), and the token emitted after them (an index into U): from the residual
    ``normalize(max(p - q, 0))`` at the first rejection, or from ``p[:, K]`` when all pass.
    """
    b, k1, u = p.shape
    k = k1 - 1
    rows = np.arange(b)[:, None]
    cols = np.arange(k)[None, :]
    px = p[:, :k][rows, cols, draft]  # [B, K]
    qx = q[rows, cols, draft]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(qx > 0, px / np.where(qx > 0, qx, 1.0), 1.0)
    ok = rng.random((b, k)) < ratio
    # accepted = length of the run of passes from the start
    n_acc = np.where(ok.all(axis=1), k, np.argmin(ok, axis=1)).astype(np.int64)
    pm = p[np.arange(b), n_acc]  # [B, U]
    qm = np.concatenate([q, np.zeros((b, 1, u))], axis=1)[np.arange(b), n_acc]  # zeros at the bonus row
    resid = np.maximum(pm - qm, 0.0)
    total = resid.sum(axis=1, keepdims=True)
    # p == q leaves nothing to correct (a rejection is then impossible up to rounding): use p
    resid = np.where(total > 1e-12, resid / np.where(total > 0, total, 1.0), pm / pm.sum(axis=1, keepdims=True))
    return n_acc, sample(resid, rng)


def verify_greedy(draft: Sequence[int], target_argmax: Sequence[int]) -> tuple[int, int]:
    """Greedy verification: ``draft`` [K] token ids, ``target_argmax`` [K+1] token ids.

    Returns ``(n_accepted, token)``: drafts match the target's argmax up to ``n_accepted``,
    then the target's own token is emitted.
    """
    n = 0
    while n < len(draft) and draft[n] == target_argmax[n]:
        n += 1
    return n, int(target_argmax[n])


def verify_candidates(draft: Sequence[int], p: Sequence[Candidates], q: Sequence[Candidates],
                      rng: np.random.Generator) -> tuple[int, int]:
    """:func:`verify` for one request on sparse distributions.

    ``draft``: [K] token ids; ``p``: K+1 target distributions; ``q``: K draft distributions.
    Returns ``(n_accepted, token id)``.
    """
    k = len(draft)
    ids, dense = dense_support(list(p) + list(q), extra=draft)
    local = np.searchsorted(ids, np.asarray(draft, dtype=np.int64))
    n, tok = verify(dense[None, :k + 1], dense[None, k + 1:], local[None], rng)
    return int(n[0]), int(ids[tok[0]])


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens one verification yields with ``k`` drafts at per-token acceptance ``alpha``:
    ``(1 - alpha^(k+1)) / (1 - alpha)`` (Leviathan et al., eq. 1)."""
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def accepted_count_probs(beta: Sequence[float]) -> np.ndarray:
    """Distribution of the number of accepted drafts when position ``k`` passes with
    probability ``beta[k]`` independently of the others: float64 [K+1]."""
    k = len(beta)
    out = np.zeros(k + 1)
    run = 1.0
    for m in range(k):
        out[m] = run * (1.0 - beta[m])
        run *= beta[m]
    out[k] = run
    return out


def choose_k(alpha: float, draft_cost: float, verify_cost: Sequence[float], target_cost: float,
             k_max: int = 8) -> tuple[int, float]:
    """The number of drafts that maximises expected tokens per second.

    ``draft_cost``: seconds per draft pass; ``verify_cost[k]``: seconds of a target pass
    over ``k + 1`` tokens (index 0..k_max); ``target_cost``: seconds of a plain one-token
    target step. Returns ``(k, speedup)`` with ``speedup`` the expected tokens/s against
    decoding without a draft.
    """
    best_k, best = 1, 0.0
    for k in range(1, k_max + 1):
        rate = expected_tokens(alpha, k) / (k * draft_cost + verify_cost[k])
        if rate > best:
            best_k, best = k, rate
    return best_k, best * target_cost
