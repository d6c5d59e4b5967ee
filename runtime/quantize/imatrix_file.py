"""The importance matrix on disk, in llama.cpp's GGUF imatrix format.

``general.type = imatrix``; per weight two F32 tensors, ``<name>.in_sum2`` (sums of squared
input activations per input channel) and ``<name>.counts`` (rows seen); the keys
``imatrix.datasets``, ``imatrix.chunk_count`` and ``imatrix.chunk_size``. ``llama-quantize
--imatrix`` reads the same file, so a matrix Hearth measured serves llama.cpp's tools too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFWriter


@dataclass(slots=True)
class Importance:
    """Per weight name: sums of ``x**2`` per input channel and the number of rows."""

    sums: dict[str, np.ndarray]
    counts: dict[str, int]
    datasets: list[str]
    chunk_count: int
    chunk_size: int

    def mean(self, name: str) -> np.ndarray | None:
        """The mean squared activation per input channel (what the quantizer weights by)."""
        if name not in self.sums or self.counts[name] <= 0:
            return None
        return (self.sums[name] / self.counts[name]).astype(np.float32)


def path_beside(model: Path) -> Path:
    return model.with_name(model.stem + ".imatrix.gguf")


def save(imp: Importance, path: Path) -> Path:
    """Write atomically: a partial file never sits where a finished one is looked for."""
    tmp = path.with_name(path.name + ".part")
    w = GGUFWriter(str(tmp), arch="imatrix")  # llama.cpp's reader ignores the architecture key
    w.add_type("imatrix")
    w.add_array("imatrix.datasets", imp.datasets)
    w.add_uint32("imatrix.chunk_count", imp.chunk_count)
    w.add_uint32("imatrix.chunk_size", imp.chunk_size)
    for name in sorted(imp.sums):
        w.add_tensor(f"{name}.in_sum2", imp.sums[name].astype(np.float32).reshape(1, -1))
        w.add_tensor(f"{name}.counts", np.array([[imp.counts[name]]], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)
    return path


def load(path: Path) -> Importance:
    r = GGUFReader(str(path))

    def field(key: str):
        f = r.fields.get(key)
        return None if f is None else f.contents()

    sums: dict[str, np.ndarray] = {}
    counts: dict[str, int] = {}
    for t in r.tensors:
        if t.name.endswith(".in_sum2"):
            sums[t.name[: -len(".in_sum2")]] = np.array(t.data, dtype=np.float64).reshape(-1)
        elif t.name.endswith(".counts"):
            counts[t.name[: -len(".counts")]] = int(np.array(t.data).reshape(-1)[0])
    return Importance(sums, counts, list(field("imatrix.datasets") or []),
                      int(field("imatrix.chunk_count") or 0), int(field("imatrix.chunk_size") or 0))
