"""Log-probabilities of tokens under the model's own softmax over one logits row.

The numbers are ``log softmax(logits)`` of the raw row, at temperature 1, before any
penalty, top-k/top-p/min-p truncation or temperature: the model's distribution, which is
what perplexity tools and evaluation harnesses compare. The log-sum-exp runs in float64
(a float32 sum over a 262k vocabulary loses digits a perplexity over thousands of tokens
would show).

Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the most alternatives per position the APIs return (OpenAI's and Ollama's limit)
MAX_TOP = 20


@dataclass(slots=True)
class RowLogprobs:
    """One position: the chosen token's logprob, and the ``n`` most likely tokens.

    ``top_ids``: int64 [n], most likely first (ties in token-id order); ``top_logprobs``:
    float64 [n], matching.
    """

    logprob: float
    top_ids: np.ndarray
    top_logprobs: np.ndarray


def log_normalizer(logits: np.ndarray) -> float:
    """``log(sum(exp(logits)))`` of one row (float [V]), computed stably in float64."""
    z = logits.astype(np.float64)
    m = float(z.max())
    return m + float(np.log(np.exp(z - m).sum()))


def top_n(logits: np.ndarray, n: int) -> np.ndarray:
    """Indices of the ``n`` largest entries of a row, largest first (stable for ties)."""
    v = logits.shape[0]
    n = min(n, v)
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    ids = np.argpartition(-logits, n - 1)[:n] if n < v else np.arange(v)
    # sort by value descending, then by id, so equal logits come in a reproducible order
    order = np.lexsort((ids, -logits[ids].astype(np.float64)))
    return ids[order].astype(np.int64)


def row_logprobs(logits: np.ndarray, token: int, n: int = 0) -> RowLogprobs:
    """The logprob of ``token`` and the top ``n`` under ``log_softmax(logits)``.

    ``logits``: float [V], one output row of the model; ``token``: a token id in [0, V);
    ``n``: 0..MAX_TOP alternatives.
    """
    if not 0 <= n <= MAX_TOP:
        raise ValueError(f"top n must be between 0 and {MAX_TOP}, got {n}")
    lse = log_normalizer(logits)
    ids = top_n(logits, n)
    return RowLogprobs(float(logits[token]) - lse, ids, logits[ids].astype(np.float64) - lse)


def sequence_logprobs(rows: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Logprobs of ``tokens[i]`` under row ``i``: ``rows`` float [N, V], ``tokens`` int [N] ->
    float64 [N]. (Batched form for whole prompts and for tests.)"""
    z = rows.astype(np.float64)
    m = z.max(axis=1, keepdims=True)
    lse = (m + np.log(np.exp(z - m).sum(axis=1, keepdims=True)))[:, 0]
    return z[np.arange(z.shape[0]), np.asarray(tokens, dtype=np.int64)] - lse
