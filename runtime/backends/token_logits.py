"""The logits of every position of a token chunk: what quality measurement compares."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Self

import llama_cpp as lc
import numpy as np

from runtime.backends.llama import ContextConfig, LlamaBackend


class ChunkScorer:
    """One model, one context of ``chunk`` tokens; ``logits(chunk)`` -> float32 [n, n_vocab]."""

    def __init__(self, model: str | Path, chunk: int, threads: int = 0) -> None:
        self.backend = LlamaBackend(model, ContextConfig(n_ctx=chunk, n_seq_max=1, n_batch=chunk,
                                                         n_threads=threads))
        self.n_vocab = self.backend.n_vocab

    def logits(self, tokens: list[int]) -> np.ndarray:
        b = self.backend
        b.clear()
        b.batch.clear()
        b.batch.add_outputs(tokens, 0, 0)
        b.decode(b.batch)
        ptr = lc.llama_get_logits(b.ctx)  # the outputs of the batch, in order
        return np.ctypeslib.as_array(ptr, shape=(len(tokens), self.n_vocab)).copy()

    def each(self, chunks: list[list[int]]) -> Iterator[np.ndarray]:
        for c in chunks:
            yield self.logits(c)

    def close(self) -> None:
        self.backend.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
