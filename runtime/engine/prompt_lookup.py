"""Prompt-lookup drafting: propose the tokens that followed the longest earlier match.

Editing, summarising and code changes repeat long spans of the prompt. The draft is what
followed the earlier occurrence of the request's last tokens (prompt and output so far) that
matches the most of them, up to ``MAX_MATCH``; among equally long matches, the most recent.
No model runs; the target verifies the draft like any other (a deterministic draft is a
one-hot ``q``).

How long the match is says how far to trust it: a one- or two-token match in code often
lands in the wrong function (the most recent ``return state``), where a match of
``COPY_MATCH`` tokens or more is the model copying a span and goes on for many tokens. The
speculator tracks the acceptance of the two kinds apart and drafts much further on a copy
(llama.cpp's ``ngram-simple`` drafts only after a 12-token match, up to 48 tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the longest suffix compared: a longer match says nothing more
MAX_MATCH = 16
#: a match this long is a copy in progress
COPY_MATCH = 6


@dataclass(frozen=True, slots=True)
class Found:
    tokens: list[int]  #: the draft: what followed the match
    match: int  #: how many of the request's last tokens the earlier occurrence matched

    @property
    def copy(self) -> bool:
        return self.match >= COPY_MATCH


def lookup(tokens: list[int] | np.ndarray, k: int, max_match: int = MAX_MATCH) -> Found | None:
    """Up to ``k`` drafted tokens for ``tokens`` [n], or None when the last token never occurred
    before (or ``k`` < 1)."""
    arr = np.asarray(tokens, dtype=np.int64)
    n = arr.size
    if n < 2 or k < 1:
        return None
    # candidates: earlier positions i holding the last token; each round keeps those whose
    # match reaches one token further back
    cand = np.flatnonzero(arr[:n - 1] == arr[n - 1])
    match = 1
    while cand.size and match < max_match:
        back = cand - match
        keep = cand[(back >= 0) & (arr[np.maximum(back, 0)] == arr[n - 1 - match])]
        if not keep.size:
            break
        cand = keep
        match += 1
    if not cand.size:
        return None
    start = int(cand[-1]) + 1
    return Found(arr[start:start + k].tolist(), match)
