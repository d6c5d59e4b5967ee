"""GGUF embedding and reranking models through llama.cpp (``Llama(embedding=True)``).

The same interface as ``runtime.backends.onnx_embedder.OnnxEmbedder`` (``encode``, ``from_ids``,
``embed``, ``score``), so the embedding worker serves either. llama.cpp pools as the model's
metadata says (``<arch>.pooling_type``: mean, CLS, last; rank for reranker GGUFs, whose
pooled output is the relevance logit) unless a pooling is asked for. Sequences are decoded
together in batches of up to ``n_batch`` tokens and ``n_seq_max`` sequences.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime.backends.amx import keep_extra_buffers_off
from runtime.backends.onnx_embedder import BadTokens, Encoded, TooLong, l2_normalise

_POOLINGS = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}


class LlamaEmbedder:
    def __init__(self, path: str, *, pooling: str | None = None, normalize: bool = True, n_ctx: int = 2048,
                 threads: int = 2, n_gpu_layers: int = 0, n_seq: int = 16) -> None:
        import llama_cpp

        self._llama_cpp = llama_cpp
        kwargs: dict[str, Any] = dict(
            model_path=path, embedding=True, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=threads,
            n_threads_batch=threads, n_gpu_layers=n_gpu_layers, n_seq_max=n_seq, kv_unified=True, verbose=False)
        if pooling is not None:
            kwargs["pooling_type"] = _POOLINGS[pooling]
        keep_extra_buffers_off()  # llama_cpp.Llama takes llama.cpp's default model parameters
        self.llm = llama_cpp.Llama(**kwargs)
        kind: int = self.llm.pooling_type()  # type: ignore[assignment]  # llama_cpp says str; it is the enum's int
        self.pooling = {v: k for k, v in _POOLINGS.items()}.get(kind, "mean")
        self.kind = "rerank" if kind == _POOLINGS["rank"] else "embedding"
        self.normalize = normalize and self.kind == "embedding"
        self.max_length = min(n_ctx, self.llm.n_ctx())
        self.vocab_size = self.llm.n_vocab()
        self.dimensions = self.llm.n_embd()
        self.n_seq = self.batch_size = n_seq  #: sequences one batch holds at most
        self.batch_tokens = self.llm.n_batch  #: tokens one batch (one decode) holds at most
        vocab = self.llm._model.vocab
        self._bos = llama_cpp.llama_vocab_bos(vocab)
        self._eos = llama_cpp.llama_vocab_eos(vocab)
        self._sep = llama_cpp.llama_vocab_sep(vocab)

    def _check(self, i: int, ids: list[int], truncate: bool) -> list[int]:
        if len(ids) > self.max_length:
            if not truncate:
                raise TooLong(i, len(ids), self.max_length)
            ids = ids[:self.max_length]
        return ids

    def encode(self, texts: list[str], truncate: bool, pairs: list[str] | None = None) -> list[Encoded]:
        out = []
        for i, text in enumerate(texts):
            if pairs is None:
                ids = self.llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
            else:  # llama.cpp's rerank input: BOS query EOS SEP document EOS ([CLS] q [SEP] d [SEP] for BERT)
                q = self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
                d = self.llm.tokenize(pairs[i].encode("utf-8"), add_bos=False, special=False)
                end = self._eos if self._eos is not None and self._eos >= 0 else self._sep
                ids = [t for t in [self._bos, *q, self._eos, self._sep, *d, end] if t is not None and t >= 0]
            out.append(Encoded(self._check(i, ids, truncate), []))
        return out

    def from_ids(self, rows: list[list[int]], truncate: bool) -> list[Encoded]:
        out = []
        for i, ids in enumerate(rows):
            if not ids:
                raise BadTokens(f"input {i} is an empty list of token ids")
            bad = next((t for t in ids if not 0 <= t < self.vocab_size), None)
            if bad is not None:
                raise BadTokens(f"input {i} has token id {bad}, outside the vocabulary (0..{self.vocab_size - 1})")
            out.append(Encoded(self._check(i, list(ids), truncate), []))
        return out

    def _pooled(self, encoded: list[Encoded], width: int) -> np.ndarray:
        llama_cpp, llm = self._llama_cpp, self.llm
        rows: list[np.ndarray] = []
        batch = llm._batch
        sizes: list[int] = []

        def flush() -> None:
            llm._ctx.kv_cache_clear()
            llm._ctx.decode(batch)
            batch.reset()
            for s in range(len(sizes)):
                ptr = llama_cpp.llama_get_embeddings_seq(llm._ctx.ctx, s)
                rows.append(np.ctypeslib.as_array(ptr, shape=(width,)).copy())
            sizes.clear()

        batch.reset()
        total = 0
        for e in encoded:
            if sizes and (total + len(e.ids) > llm.n_batch or len(sizes) >= self.n_seq):
                flush()
                total = 0
            batch.add_sequence(e.ids, len(sizes), True)
            sizes.append(len(e.ids))
            total += len(e.ids)
        if sizes:
            flush()
        llm._ctx.kv_cache_clear()
        return np.asarray(rows, dtype=np.float32).reshape(len(encoded), width)

    def embed(self, encoded: list[Encoded]) -> np.ndarray:
        v = self._pooled(encoded, self.dimensions) if encoded else np.zeros((0, self.dimensions), np.float32)
        return l2_normalise(v) if self.normalize else v

    def score(self, encoded: list[Encoded]) -> np.ndarray:
        if self.kind != "rerank":
            raise BadTokens("this model has no rank pooling: it cannot score pairs")
        return self._pooled(encoded, 1)[:, 0] if encoded else np.zeros(0, np.float32)
