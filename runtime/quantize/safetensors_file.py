"""Reading ``.safetensors`` with numpy: an 8-byte little-endian header length, a JSON header
(name -> dtype, shape, data_offsets), then the tensors' bytes."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np

_DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "I8": np.int8,
           "U8": np.uint8, "I16": np.int16, "F64": np.float64, "BOOL": np.bool_}
MAX_HEADER = 100 * 1024 * 1024


class BadSafetensors(ValueError):
    pass


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of one file, as views of its bytes. Every tensor's shape and data offsets are
    checked against each other and against the file's real size before it is used: a header
    is as untrusted as the hub that served it."""
    data = Path(path).read_bytes()
    if len(data) < 8:
        raise BadSafetensors(f"{path} is too short to be a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    if n > min(MAX_HEADER, len(data) - 8):
        raise BadSafetensors(f"{path}: header length {n} is past the file")
    try:
        header = json.loads(data[8:8 + n])
    except ValueError:
        raise BadSafetensors(f"{path}: the header is not JSON") from None
    if not isinstance(header, dict):
        raise BadSafetensors(f"{path}: the header is not a JSON object")
    body = memoryview(data)[8 + n:]
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        kind = meta.get("dtype") if isinstance(meta, dict) else None
        found = np.uint16 if kind == "BF16" else _DTYPES.get(kind) if isinstance(kind, str) else None
        if found is None:
            raise BadSafetensors(f"{path}: {name} has an unsupported dtype {kind!r}")
        dtype = np.dtype(found)
        shape, (start, end) = _extent(path, name, meta, dtype.itemsize, len(body))
        arr = np.frombuffer(body[start:end], dtype=dtype).reshape(shape)
        if kind == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        out[name] = arr
    return out


def _extent(path: Path, name: str, meta: dict, itemsize: int, body: int) -> tuple[tuple[int, ...], tuple[int, int]]:
    """(shape, (start, end)) of one tensor, when its shape, its offsets and the file agree."""
    shape, offsets = meta.get("shape"), meta.get("data_offsets")
    if (not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape)
            or not isinstance(offsets, list) or len(offsets) != 2 or not all(type(o) is int for o in offsets)):
        raise BadSafetensors(f"{path}: {name} has no valid shape and data offsets")
    start, end = offsets
    if not 0 <= start <= end <= body:
        raise BadSafetensors(f"{path}: {name}'s data ({start}..{end}) is past the file ({body} bytes of data)")
    if math.prod(shape) * itemsize != end - start:
        raise BadSafetensors(f"{path}: {name} has shape {shape} but {end - start} bytes of data")
    return tuple(shape), (start, end)
