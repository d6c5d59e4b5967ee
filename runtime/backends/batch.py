"""A llama_batch allocated once and filled through numpy views.

A ctypes index per token costs microseconds; a numpy slice write costs nanoseconds, so
every field of the batch points into a numpy array that lives as long as the batch.
"""

from __future__ import annotations

import ctypes

import llama_cpp as lc
import numpy as np


class TokenBatch:
    """Tokens of several sequences for one llama_decode; each token belongs to one sequence."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.tokens = np.zeros(capacity, dtype=np.int32)
        self.pos = np.zeros(capacity, dtype=np.int32)
        self.n_seq_id = np.ones(capacity, dtype=np.int32)
        self.seq = np.zeros(capacity, dtype=np.int32)
        self.logits = np.zeros(capacity, dtype=np.int8)
        base = self.seq.ctypes.data
        seq_ptr_t = ctypes.POINTER(lc.llama_seq_id)
        self._seq_ptrs = (seq_ptr_t * capacity)(
            *[ctypes.cast(base + 4 * i, seq_ptr_t) for i in range(capacity)]
        )
        b = lc.llama_batch()
        # llama_cpp annotates these POINTER fields (see llama_batch._fields_) as ctypes arrays.
        b.token = self.tokens.ctypes.data_as(ctypes.POINTER(lc.llama_token))  # type: ignore[assignment]  # stub: POINTER field
        b.embd = ctypes.POINTER(ctypes.c_float)()  # type: ignore[assignment]  # stub: POINTER field
        b.pos = self.pos.ctypes.data_as(ctypes.POINTER(lc.llama_pos))  # type: ignore[assignment]  # stub: POINTER field
        b.n_seq_id = self.n_seq_id.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))  # type: ignore[assignment]  # stub: POINTER field
        b.seq_id = self._seq_ptrs  # type: ignore[assignment]  # stub: POINTER(POINTER) field
        b.logits = self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))  # type: ignore[assignment]  # stub: POINTER field
        self._batch = b
        self.n = 0

    def clear(self) -> None:
        self.n = 0

    @property
    def free(self) -> int:
        return self.capacity - self.n

    def add(self, tokens: list[int], pos0: int, seq_id: int, want_logits: bool) -> int | None:
        """Append ``tokens`` of ``seq_id`` at positions ``pos0...``.

        Returns the batch index of the last token when ``want_logits`` (its logits are
        computed), else None.
        """
        k = len(tokens)
        n = self.n
        if k == 0 or n + k > self.capacity:
            raise ValueError(f"batch overflow: {n} + {k} > {self.capacity}")
        end = n + k
        self.tokens[n:end] = tokens
        self.pos[n:end] = np.arange(pos0, pos0 + k, dtype=np.int32)
        self.seq[n:end] = seq_id
        self.logits[n:end] = 0
        self.n = end
        if want_logits:
            self.logits[end - 1] = 1
            return end - 1
        return None

    def add_outputs(self, tokens: list[int], pos0: int, seq_id: int) -> int:
        """Append ``tokens`` with logits at every one; returns the batch index of the first."""
        first = self.n
        self.add(tokens, pos0, seq_id, False)
        self.logits[first:self.n] = 1
        return first

    def prepare(self) -> lc.llama_batch:
        self._batch.n_tokens = self.n
        return self._batch


class EmbdBatch:
    """Embeddings (an image's or a clip's, from the projector) for positions of one sequence.

    ``pos``: int32 [n], one position each, or [n_sections, n] for a model with M-RoPE
    (``llama_batch.pos`` then holds them section-major, as llama.cpp reads an embedding batch)."""

    def __init__(self, embd: np.ndarray, pos: np.ndarray, seq_id: int) -> None:
        n = len(embd)
        self.embd = np.ascontiguousarray(embd, dtype=np.float32)
        if pos.shape[-1] != n:
            raise ValueError(f"{pos.shape[-1]} positions for {n} embeddings")
        self.pos = np.ascontiguousarray(pos, dtype=np.int32).ravel()  # [section][token]
        self.n_seq_id = np.ones(n, dtype=np.int32)
        self.seq = np.full(n, seq_id, dtype=np.int32)
        self.logits = np.zeros(n, dtype=np.int8)
        base = self.seq.ctypes.data
        seq_ptr_t = ctypes.POINTER(lc.llama_seq_id)
        self._seq_ptrs = (seq_ptr_t * n)(*[ctypes.cast(base + 4 * i, seq_ptr_t) for i in range(n)])
        b = lc.llama_batch()
        b.n_tokens = n
        b.token = ctypes.POINTER(lc.llama_token)()  # type: ignore[assignment]  # stub: POINTER field
        b.embd = self.embd.ctypes.data_as(ctypes.POINTER(ctypes.c_float))  # type: ignore[assignment]  # stub: POINTER field
        b.pos = self.pos.ctypes.data_as(ctypes.POINTER(lc.llama_pos))  # type: ignore[assignment]  # stub: POINTER field
        b.n_seq_id = self.n_seq_id.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))  # type: ignore[assignment]  # stub: POINTER field
        b.seq_id = self._seq_ptrs  # type: ignore[assignment]  # stub: POINTER(POINTER) field
        b.logits = self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))  # type: ignore[assignment]  # stub: POINTER field
        self._batch = b
        self.n = n

    def prepare(self) -> lc.llama_batch:
        return self._batch
