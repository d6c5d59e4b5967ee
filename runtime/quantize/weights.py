"""The source model's weights, read from its GGUF and dequantized to float32 with numpy."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize

#: llama.cpp quantizes these matrices (2-D and up, weights of the graph), never norms or biases
_NEVER = ("_norm.weight", ".bias", "rope_freqs", "pos_embd", "token_types")


@dataclass(slots=True)
class WeightInfo:
    name: str
    shape: tuple[int, ...]  #: ggml order: row length first
    type_name: str
    n_bytes: int


class SourceWeights:
    """The tensors of one GGUF; ``matrices`` are those a quantizer may change."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._reader = GGUFReader(str(self.path))
        self._tensors = {t.name: t for t in self._reader.tensors}
        self.infos = [WeightInfo(t.name, tuple(int(d) for d in t.shape), t.tensor_type.name, int(t.n_bytes))
                      for t in self._reader.tensors]
        self.file_size = self.path.stat().st_size

    @property
    def matrices(self) -> list[WeightInfo]:
        return [i for i in self.infos
                if len(i.shape) >= 2 and i.shape[1] > 1 and not i.name.endswith(_NEVER)]

    @property
    def fixed_bytes(self) -> int:
        """Bytes that quantization leaves alone: metadata, norms, the other small tensors."""
        return self.file_size - sum(i.n_bytes for i in self.matrices)

    def n_weights(self) -> int:
        return sum(int(np.prod(i.shape)) for i in self.matrices)

    def rows(self, name: str, rows: np.ndarray | None = None) -> np.ndarray:
        """Tensor ``name`` as float32 [n_rows, row_length], or only the rows ``rows``."""
        t = self._tensors[name]
        raw = t.data
        row = int(t.shape[0])
        if t.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16):
            flat = np.asarray(raw).reshape(-1, row)
            if t.tensor_type == GGMLQuantizationType.BF16:
                flat = dequantize(np.asarray(raw), t.tensor_type).reshape(-1, row)
            out = flat if rows is None else flat[rows]
            return np.asarray(out, dtype=np.float32)
        packed = np.asarray(raw).reshape(-1, np.asarray(raw).shape[-1])  # one row of blocks per row
        if rows is not None:
            packed = packed[rows]
        return dequantize(packed, t.tensor_type).reshape(-1, row).astype(np.float32)
