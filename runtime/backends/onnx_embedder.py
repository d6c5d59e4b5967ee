"""Sentence embeddings and cross-encoder scores with ONNX Runtime (the only import of it).

One ``OnnxEmbedder`` holds one ``InferenceSession`` with few intra-op threads (default 2) that
do not spin when idle, so a chat model decoding beside it keeps its cores. The session is sized
for one small model: no memory arena (the arena keeps its high-water mark, 830 MiB after one
batch of 32 long inputs for the embedded MiniLM, against 160 MiB without it and no measurable
loss of speed), and the heap the graph optimizer freed is handed back to the system once the
session is built and after each call (``malloc_trim``: 162 -> 108 MiB for that model's session
on glibc, and a batch of 32 long inputs no longer leaves 100 MiB of activations in the heap). Texts are tokenized with ``tokenizers``
(the model's ``tokenizer.json``), cut at the model's maximum length (or refused when the
caller forbids it), sorted by length and run in padded batches; token states are pooled
(mean over the attention mask, CLS, last token, max) and L2-normalised as the model's
configuration says (``runtime.store.onnx_model``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from runtime.backends.free_heap import release_free_heap
from runtime.store.onnx_model import OnnxModelInfo


class TooLong(ValueError):
    """An input is longer than the model's maximum and truncation was not allowed."""

    def __init__(self, index: int, n_tokens: int, limit: int) -> None:
        super().__init__(f"input {index} has {n_tokens} tokens, more than the model's maximum of {limit}; "
                         "shorten it or allow truncation")
        self.index, self.n_tokens, self.limit = index, n_tokens, limit


class BadTokens(ValueError):
    pass


@dataclass(slots=True)
class Encoded:
    ids: list[int]
    type_ids: list[int]


def pool(states: np.ndarray, mask: np.ndarray, how: str) -> np.ndarray:
    """[batch, seq, dim] token states -> [batch, dim] with the attention ``mask`` [batch, seq]."""
    m = mask.astype(np.float32)[:, :, None]
    if how == "cls":
        return states[:, 0]
    if how == "last":
        last = mask.sum(axis=1).astype(np.int64) - 1
        return states[np.arange(states.shape[0]), np.maximum(last, 0)]
    if how == "max":
        return np.where(m > 0, states, -np.inf).max(axis=1)
    return (states * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)


def l2_normalise(v: np.ndarray) -> np.ndarray:
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)


def session_options(threads: int, spin: bool = False) -> ort.SessionOptions:
    """One small model's session: ``threads`` intra-op threads (sleeping when idle unless
    ``spin``), one inter-op thread, sequential execution, no memory arena."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = max(1, threads)
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.enable_cpu_mem_arena = False
    if not spin:  # idle threads sleep instead of spinning on cores a chat model decodes on
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return opts


class OnnxEmbedder:
    def __init__(self, info: OnnxModelInfo, threads: int = 2, batch_size: int = 32, spin: bool = False) -> None:
        self.info = info
        self.batch_size = max(1, batch_size)
        self.session = ort.InferenceSession(str(info.model_file), session_options(threads, spin),
                                            providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        outputs = self.session.get_outputs()
        self.output_name = outputs[0].name
        self.tokenizer = Tokenizer.from_file(str(info.tokenizer_file))
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        self.vocab_size = self.tokenizer.get_vocab_size(with_added_tokens=True)
        pad = self.tokenizer.token_to_id("[PAD]")
        if pad is None:
            pad = self.tokenizer.token_to_id("<pad>")
        self.pad_id = pad if pad is not None else 0
        shape = outputs[0].shape
        self.dimensions = shape[-1] if isinstance(shape[-1], int) else info.dimensions
        release_free_heap()  # the model's protobuf and the optimizer's copies are freed by now

    @property
    def batch_tokens(self) -> int:
        """Padded tokens one batch holds at most: ``batch_size`` inputs of the maximum length."""
        return self.batch_size * self.info.max_length

    # -- tokens ---------------------------------------------------------------------------
    def encode(self, texts: list[str], truncate: bool, pairs: list[str] | None = None) -> list[Encoded]:
        """Tokens of each text (of each (text, pair) for a cross-encoder), within the maximum."""
        if pairs is None:
            encs = self.tokenizer.encode_batch(texts)
        else:
            encs = self.tokenizer.encode_batch(list(zip(texts, pairs)))
        out = []
        for i, e in enumerate(encs):
            ids, types = list(e.ids), list(e.type_ids)
            if len(ids) > self.info.max_length:
                if not truncate:
                    raise TooLong(i, len(ids), self.info.max_length)
                ids, types = self._cut(ids, types)
            out.append(Encoded(ids, types))
        return out

    def _cut(self, ids: list[int], types: list[int]) -> tuple[list[int], list[int]]:
        """Cut to the maximum, keeping the final special token (``[SEP]``, ``</s>``) the
        tokenizer's post-processor added."""
        n = self.info.max_length
        last = ids[-1]
        if self.tokenizer.id_to_token(last) in ("[SEP]", "</s>", "<|endoftext|>"):
            return ids[:n - 1] + [last], types[:n - 1] + [types[-1]]
        return ids[:n], types[:n]

    def from_ids(self, rows: list[list[int]], truncate: bool) -> list[Encoded]:
        """Token-id input, used as given (no special tokens added)."""
        out = []
        for i, ids in enumerate(rows):
            if not ids:
                raise BadTokens(f"input {i} is an empty list of token ids")
            bad = next((t for t in ids if not 0 <= t < self.vocab_size), None)
            if bad is not None:
                raise BadTokens(f"input {i} has token id {bad}, outside the vocabulary (0..{self.vocab_size - 1})")
            if len(ids) > self.info.max_length:
                if not truncate:
                    raise TooLong(i, len(ids), self.info.max_length)
                ids = ids[:self.info.max_length]
            out.append(Encoded(list(ids), [0] * len(ids)))
        return out

    # -- running --------------------------------------------------------------------------
    def _run(self, batch: list[Encoded]) -> tuple[np.ndarray, np.ndarray]:
        width = max(len(e.ids) for e in batch)
        ids = np.full((len(batch), width), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        types = np.zeros((len(batch), width), dtype=np.int64)
        for row, e in enumerate(batch):
            n = len(e.ids)
            ids[row, :n], mask[row, :n], types[row, :n] = e.ids, 1, e.type_ids
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
        if "position_ids" in self.input_names:  # some exports take positions as an input
            feed["position_ids"] = np.broadcast_to(np.arange(width, dtype=np.int64), ids.shape).copy()
        feed = {name: feed[name] for name in self.input_names if name in feed}
        (out,) = self.session.run([self.output_name], feed)
        return out, mask

    def _batched(self, encoded: list[Encoded], each) -> list:
        """``each(outputs, mask)`` over length-sorted batches, results back in input order."""
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].ids))
        results: list = [None] * len(encoded)
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            out, mask = self._run([encoded[i] for i in idx])
            for i, row in zip(idx, each(out, mask)):
                results[i] = row
        release_free_heap()  # the activations' pages, which the C heap would otherwise keep
        return results

    def embed(self, encoded: list[Encoded]) -> np.ndarray:
        """[n, dim] float32 vectors, pooled and (if configured) normalised."""
        if not encoded:
            return np.zeros((0, self.dimensions or 0), dtype=np.float32)

        def each(out, mask):
            v = pool(out, mask, self.info.pooling) if out.ndim == 3 else out
            return l2_normalise(v) if self.info.normalize else v

        return np.asarray(self._batched(encoded, each), dtype=np.float32)

    def score(self, encoded: list[Encoded]) -> np.ndarray:
        """A cross-encoder's relevance logit for each encoded (query, document) pair."""
        def each(out, mask):
            logits = out if out.ndim == 2 else out.reshape(out.shape[0], -1)
            return logits[:, 0] if logits.shape[1] == 1 else logits[:, -1]

        return np.asarray(self._batched(encoded, each), dtype=np.float32)
