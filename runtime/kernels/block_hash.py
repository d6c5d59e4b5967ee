"""Chained hashes of full KV blocks, as in vLLM's prefix caching.

``h_i = H(h_{i-1}, tokens_i)``: a block's hash covers every token before it, so equal
hashes mean equal prefixes (up to a 64-bit collision, which the block pool rules out by
comparing the stored tokens on every hit).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

ROOT = 0  # the parent hash of a sequence's first block, in the cache every client shares


def scope_root(scope: str) -> int:
    """The parent hash of a first block in the cache scope ``scope`` ("": the shared one, ``ROOT``):
    the chains of two scopes never meet, so neither finds the other's blocks."""
    if not scope:
        return ROOT
    return int.from_bytes(hashlib.blake2b(scope.encode(), digest_size=8, person=b"hearth-scope").digest(), "little")


def hash_block(parent: int, tokens: Sequence[int] | np.ndarray) -> int:
    """64-bit BLAKE2b of the parent hash and the block's token ids (int32)."""
    h = hashlib.blake2b(parent.to_bytes(8, "little"), digest_size=8)
    h.update(np.asarray(tokens, dtype=np.int32).tobytes())
    return int.from_bytes(h.digest(), "little")


def hash_blocks(tokens: Sequence[int], block_size: int, parent: int = ROOT) -> list[int]:
    """Hashes of the full blocks of ``tokens`` [n_tokens] (a trailing partial block has none)."""
    arr = np.asarray(tokens, dtype=np.int32)
    out: list[int] = []
    for start in range(0, len(arr) - block_size + 1, block_size):
        parent = hash_block(parent, arr[start:start + block_size])
        out.append(parent)
    return out
