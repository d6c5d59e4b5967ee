"""Prompt-lookup drafting: propose the tokens that followed the last n-gram before.

Editing, summarising and code changes repeat long spans of the prompt: when the last
``n`` tokens (``n`` = 3, 2, then 1) occurred earlier in the request's tokens (prompt and
output so far), the tokens after the most recent earlier occurrence are the draft. No
model runs; the target verifies the draft like any other (a deterministic draft is a
one-hot ``q``).
"""

from __future__ import annotations

import numpy as np

MAX_NGRAM = 3


def lookup(tokens: list[int], k: int, max_ngram: int = MAX_NGRAM) -> list[int]:
    """Up to ``k`` drafted tokens for ``tokens`` [n] (empty when no n-gram recurs)."""
    arr = np.asarray(tokens, dtype=np.int64)
    n_tok = arr.size
    for n in range(min(max_ngram, n_tok - 1), 0, -1):
        pattern = arr[n_tok - n:]
        windows = np.lib.stride_tricks.sliding_window_view(arr[:n_tok - 1], n)
        hits = np.nonzero((windows == pattern).all(axis=1))[0]
        hits = hits[hits + n < n_tok]
        if hits.size:
            start = int(hits[-1]) + n
            return arr[start:start + k].tolist()
    return []
