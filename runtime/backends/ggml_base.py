"""libggml-base through ctypes: tensor fields, quantization of rows, type sizes.

llama-cpp-python binds the ``llama_*`` API; the ggml functions that quantizing and importance
measurement need (``ggml_quantize_chunk``, the type traits' ``to_float``, ``ggml_backend_tensor_get``)
are bound here on the very library that ``libllama`` loaded. ``GgmlTensor`` mirrors
``struct ggml_tensor`` of ggml.h (GGML_MAX_DIMS 4, GGML_MAX_OP_PARAMS 64, GGML_MAX_SRC 10,
GGML_MAX_NAME 64) so an eval callback can read a tensor's name, shape, strides and data.
"""

from __future__ import annotations

import ctypes
import sys
from functools import cache, lru_cache
from pathlib import Path

import llama_cpp as lc
import numpy as np

MAX_DIMS, MAX_SRC, MAX_NAME, MAX_OP_PARAMS = 4, 10, 64, 64
GGML_TYPE_F32 = 0


class GgmlTensor(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * MAX_DIMS),
        ("nb", ctypes.c_size_t * MAX_DIMS),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * (MAX_OP_PARAMS // 4)),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * MAX_SRC),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * MAX_NAME),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


_to_float_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64)


class TypeTraits(ctypes.Structure):
    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", ctypes.c_void_p),
        ("from_float_ref", ctypes.c_void_p),
    ]


_f32p = ctypes.POINTER(ctypes.c_float)
_SIGNATURES: dict[str, tuple[list, object]] = {
    "ggml_quantize_chunk": ([ctypes.c_int, _f32p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                             ctypes.c_int64, _f32p], ctypes.c_size_t),
    "ggml_get_type_traits": ([ctypes.c_int], ctypes.POINTER(TypeTraits)),
    "ggml_row_size": ([ctypes.c_int, ctypes.c_int64], ctypes.c_size_t),
    "ggml_op_name": ([ctypes.c_int], ctypes.c_char_p),
    "ggml_backend_buffer_is_host": ([ctypes.c_void_p], ctypes.c_bool),
    "ggml_backend_tensor_get": ([ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t], None),
}


def _library_file() -> Path:
    folder = Path(lc.__file__).resolve().parent / "lib"
    names = {"win32": ["ggml-base.dll"], "darwin": ["libggml-base.dylib"]}.get(sys.platform, ["libggml-base.so"])
    for name in names:
        if (folder / name).is_file():
            return folder / name
    raise OSError(f"no ggml base library ({' or '.join(names)}) in {folder}: llama-cpp-python looks broken")


@lru_cache(maxsize=1)
def ggml() -> ctypes.CDLL:
    """libggml-base with the functions used here typed."""
    lib = ctypes.CDLL(str(_library_file()))
    for name, (args, res) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
    return lib


@cache
def op_id(name: str) -> int:
    """The ``enum ggml_op`` value whose name is ``name`` ("MUL_MAT"), read from the library."""
    lib = ggml()
    for i in range(256):
        text = lib.ggml_op_name(i)
        if text is None:
            break
        if text.decode() == name:
            return i
    raise LookupError(f"ggml has no op {name}")


def tensor_at(address: int) -> GgmlTensor:
    return GgmlTensor.from_address(address)


def read_f32_rows(t: GgmlTensor) -> np.ndarray:
    """An F32 tensor's rows as a [rows, ne0] float32 copy (from device memory if need be)."""
    if t.type != GGML_TYPE_F32 or t.nb[0] != 4:
        raise ValueError(f"{t.name.decode()} is not a plain F32 tensor")
    ne, nb = list(t.ne), list(t.nb)
    extent = sum((ne[i] - 1) * nb[i] for i in range(MAX_DIMS)) + 4
    lib = ggml()
    if lib.ggml_backend_buffer_is_host(t.buffer):
        raw = (ctypes.c_char * extent).from_address(t.data)
        base = np.frombuffer(raw, dtype=np.uint8)
    else:
        base = np.empty(extent, dtype=np.uint8)
        lib.ggml_backend_tensor_get(ctypes.addressof(t), base.ctypes.data, 0, extent)
    view = np.lib.stride_tricks.as_strided(base.view(np.float32), shape=(ne[3], ne[2], ne[1], ne[0]),
                                           strides=(nb[3], nb[2], nb[1], nb[0]))
    return np.array(view.reshape(-1, ne[0]), dtype=np.float32)


def row_bytes(ggml_type: int, n_per_row: int) -> int:
    return int(ggml().ggml_row_size(ggml_type, n_per_row))


def block_size(ggml_type: int) -> int:
    return int(ggml().ggml_get_type_traits(ggml_type).contents.blck_size)


def quantize_rows(ggml_type: int, rows: np.ndarray, importance: np.ndarray | None = None) -> bytes:
    """``rows`` [n, k] float32 quantized by ggml (with an importance vector [k] where given)."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    n, k = rows.shape
    out = np.empty(n * row_bytes(ggml_type, k), dtype=np.uint8)
    imp = None
    if importance is not None:
        importance = np.ascontiguousarray(importance, dtype=np.float32)
        imp = importance.ctypes.data_as(_f32p)
    size = ggml().ggml_quantize_chunk(ggml_type, rows.ctypes.data_as(_f32p), out.ctypes.data, 0, n, k, imp)
    return out[:size].tobytes()


def dequantize_rows(ggml_type: int, data: bytes, n_per_row: int) -> np.ndarray:
    """Rows of ``ggml_type`` back to float32 [n, n_per_row] with ggml's own ``to_float``."""
    traits = ggml().ggml_get_type_traits(ggml_type).contents
    if not traits.to_float:
        raise ValueError(f"ggml type {ggml_type} has no conversion to float")
    to_float = _to_float_t(traits.to_float)
    n = len(data) // row_bytes(ggml_type, n_per_row)
    out = np.empty((n, n_per_row), dtype=np.float32)
    buf = ctypes.create_string_buffer(data, len(data))
    to_float(ctypes.addressof(buf), out.ctypes.data_as(_f32p), n * n_per_row)
    return out
