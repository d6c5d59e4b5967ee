"""Reading ``.safetensors`` with numpy: an 8-byte little-endian header length, a JSON header
(name -> dtype, shape, data_offsets), then the tensors' bytes."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

_DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "I8": np.int8,
           "U8": np.uint8, "I16": np.int16, "F64": np.float64, "BOOL": np.bool_}
MAX_HEADER = 100 * 1024 * 1024


class BadSafetensors(ValueError):
    pass


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    data = Path(path).read_bytes()
    if len(data) < 8:
        raise BadSafetensors(f"{path} is too short to be a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    if n > min(MAX_HEADER, len(data) - 8):
        raise BadSafetensors(f"{path}: header length {n} is past the file")
    header = json.loads(data[8:8 + n])
    body = memoryview(data)[8 + n:]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] == "BF16":
            start, end = meta["data_offsets"]
            raw = np.frombuffer(body[start:end], dtype=np.uint16).astype(np.uint32) << 16
            out[name] = raw.view(np.float32).reshape(meta["shape"])
            continue
        dtype = _DTYPES.get(meta["dtype"])
        if dtype is None:
            raise BadSafetensors(f"{path}: {name} has an unsupported dtype {meta['dtype']}")
        start, end = meta["data_offsets"]
        out[name] = np.frombuffer(body[start:end], dtype=dtype).reshape(meta["shape"])
    return out
