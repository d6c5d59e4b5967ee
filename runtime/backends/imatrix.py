"""An importance matrix measured while llama.cpp runs the model (its ``cb_eval`` hook).

For every matrix multiplication with a weight of the model, llama.cpp's scheduler asks the
callback whether it wants the result; when it does, the inputs are computed and the callback
reads the activations ``x`` [tokens, in_channels] that meet the weight and adds ``x**2`` per
input channel: the statistics llama.cpp's own ``llama-imatrix`` gathers (sums of squares
and the number of rows, per weight). The quantizer weights each column's rounding error by
their mean (``in_sum2 / count``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import llama_cpp as lc
import numpy as np

from runtime.backends.ggml_base import GGML_TYPE_F32, op_id, read_f32_rows, tensor_at
from runtime.backends.llama import ContextConfig, LlamaBackend

#: matrices whose inputs are recorded: every block's weights, and the output projection
#: (``token_embd.weight`` when the output is tied to the embeddings)
_OUTPUT_NAMES = ("output.weight", "token_embd.weight")
#: llama.cpp's collector skips batches this small (single-token decodes)
MIN_ROWS = 16


def weight_name(raw: bytes) -> str:
    """A weight's name without the graph's decorations (``"a#blk.0.attn_q.weight#b"``)."""
    name = raw.decode(errors="replace")
    if "#" in name:
        name = name.split("#")[1]
    return name


@dataclass(slots=True)
class ImportanceSums:
    """Per weight: the sum over input rows of ``x**2`` per input channel, and the row count."""

    sums: dict[str, np.ndarray] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, x: np.ndarray) -> None:
        sq = np.einsum("ij,ij->j", x, x, dtype=np.float64)
        if name in self.sums:
            self.sums[name] += sq
            self.counts[name] += x.shape[0]
        else:
            self.sums[name] = sq
            self.counts[name] = x.shape[0]


class ImportanceCollector:
    """The eval callback; keeps the ctypes function alive as long as the collector."""

    def __init__(self) -> None:
        self.result = ImportanceSums()
        self._mul_mat = op_id("MUL_MAT")
        self.callback = lc.ggml_backend_sched_eval_callback(self._on_eval)

    def _wanted(self, t) -> str | None:
        if t.op != self._mul_mat or not t.src[0] or not t.src[1]:
            return None
        src1 = tensor_at(t.src[1])
        if src1.type != GGML_TYPE_F32 or src1.ne[1] * src1.ne[2] * src1.ne[3] < MIN_ROWS:
            return None
        name = weight_name(tensor_at(t.src[0]).name)
        return name if name.startswith("blk.") or name in _OUTPUT_NAMES else None

    def _on_eval(self, address: int, ask: bool, _user) -> bool:
        t = tensor_at(address)
        name = self._wanted(t)
        if ask:
            return name is not None
        if name is not None:
            self.result.add(name, read_f32_rows(tensor_at(t.src[1])))
        return True  # False would stop the graph


def collect_importance(model: str | Path, chunks: Iterable[list[int]], threads: int = 0,
                       on_chunk: Callable[[int], None] | None = None) -> ImportanceSums:
    """Run ``chunks`` of tokens (each from position 0, logits at every token) and collect."""
    chunks = list(chunks)
    size = max(len(c) for c in chunks)
    collector = ImportanceCollector()
    backend = LlamaBackend(model, ContextConfig(n_ctx=size, n_seq_max=1, n_batch=size, n_threads=threads),
                           eval_callback=collector.callback)
    try:
        for i, chunk in enumerate(chunks):
            backend.clear()
            batch = backend.batch
            batch.clear()
            batch.add_outputs(chunk, 0, 0)  # every row reaches the output matrix, as in llama-imatrix
            backend.decode(batch)
            if on_chunk is not None:
                on_chunk(i + 1)
    finally:
        backend.close()
    return collector.result


def tokenize_text(model: str | Path, text: str, chunk: int) -> list[list[int]]:
    """``text`` in chunks of ``chunk`` tokens, each starting with BOS where the model adds one."""
    backend = LlamaBackend(model, ContextConfig(n_ctx=64, n_seq_max=1, n_batch=64))
    try:
        tokens = backend.tokenize(text, add_special=False, parse_special=False)
        bos = [backend.bos] if backend.add_bos and backend.bos >= 0 else []
    finally:
        backend.close()
    step = chunk - len(bos)
    return [bos + tokens[i:i + step] for i in range(0, len(tokens) - step + 1, step)]

