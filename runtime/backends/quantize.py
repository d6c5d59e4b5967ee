"""Quantize a GGUF with llama.cpp's quantizer (``llama_model_quantize``).

``quantize_model`` takes a stock mix (an ``llama_ftype``), an importance matrix (per weight, the
mean squared input activation per channel) and per-tensor types, as ``llama-quantize --imatrix
--tensor-type`` does. llama.cpp has no progress callback: its log line per tensor
(``[  12/ 273] blk.1.attn_q.weight ...``) is the progress. ``requantize`` makes heavier copies
(an F32 target over the same function as its Q4_K_M draft) for speculative decoding and tests.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import llama_cpp as lc
import numpy as np

#: file types by name -> (llama_ftype, ggml type of the output and embedding tensors)
FTYPES = {"f32": (lc.LLAMA_FTYPE_ALL_F32, 0), "f16": (lc.LLAMA_FTYPE_MOSTLY_F16, 1),
          "q8_0": (lc.LLAMA_FTYPE_MOSTLY_Q8_0, 8), "q4_0": (lc.LLAMA_FTYPE_MOSTLY_Q4_0, 2)}

_quiet = None
_PROGRESS = re.compile(rb"\[\s*(\d+)/\s*(\d+)\]\s+(\S+)")


class QuantizeFailed(RuntimeError):
    pass


def stock_ftype(name: str) -> int:
    """llama_ftype of a stock mix named as llama-quantize names it ("Q4_K_M")."""
    value = getattr(lc, f"LLAMA_FTYPE_MOSTLY_{name.upper()}", None)
    if value is None:
        raise ValueError(f"llama.cpp has no quantization mix {name!r}")
    return int(value)


@dataclass(slots=True)
class QuantizeSpec:
    """What ``llama_model_quantize`` is asked: a stock mix and, optionally, Hearth's choices."""

    mix: str  #: the stock mix ("Q4_K_M"); tensors without an entry in ``tensor_types`` follow it
    tensor_types: dict[str, int] = field(default_factory=dict)  #: exact tensor name -> ggml type
    importance: dict[str, np.ndarray] = field(default_factory=dict)  #: name -> mean x**2 per channel
    threads: int = 0


def _importance_array(importance: dict[str, np.ndarray]):
    if not importance:
        return None, []
    keep = []
    rows = (lc.llama_model_imatrix_data * (len(importance) + 1))()
    for i, (name, values) in enumerate(importance.items()):
        arr = np.ascontiguousarray(values, dtype=np.float32)
        keep.append(arr)
        rows[i].name = name.encode()
        rows[i].data = arr.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        rows[i].size = arr.size
    rows[len(importance)].name = None  # the list ends at a NULL name
    return rows, keep


def _override_array(tensor_types: dict[str, int]):
    if not tensor_types:
        return None
    rows = (lc.llama_model_tensor_override * (len(tensor_types) + 1))()
    for i, (name, ggml_type) in enumerate(tensor_types.items()):
        rows[i].pattern = ("^" + re.escape(name) + "$").encode()  # llama.cpp matches with regex_search
        rows[i].type = ggml_type
    rows[len(tensor_types)].pattern = None
    return rows


def quantize_model(src: str | Path, dst: str | Path, spec: QuantizeSpec,
                   on_tensor: Callable[[int, int, str], None] | None = None) -> Path:
    """Write ``src`` quantized per ``spec`` to ``dst`` (through ``dst.part``, renamed at the end).

    ``on_tensor(done, total, name)`` is called as llama.cpp starts each tensor.
    """
    global _quiet  # C keeps only the pointer: the callback must outlive the call

    def log(level: int, text: bytes, _user) -> None:
        m = _PROGRESS.search(text or b"")
        if m and on_tensor is not None:
            on_tensor(int(m.group(1)) - 1, int(m.group(2)), m.group(3).decode(errors="replace"))

    _quiet = lc.llama_log_callback(log)
    lc.llama_log_set(_quiet, ctypes.c_void_p(0))
    params = lc.llama_model_quantize_default_params()
    params.ftype = stock_ftype(spec.mix)
    params.allow_requantize = True
    params.nthread = spec.threads
    embd, out = spec.tensor_types.get("token_embd.weight"), spec.tensor_types.get("output.weight")
    if embd is not None:
        params.token_embedding_type = embd
    if out is not None:
        params.output_tensor_type = out
    imatrix, _keep = _importance_array(spec.importance)
    overrides = _override_array(spec.tensor_types)
    if imatrix is not None:
        params.imatrix = imatrix
    if overrides is not None:
        params.tt_overrides = overrides
    dst = Path(dst)
    tmp = dst.with_name(dst.name + ".part")
    rc = lc.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
    if rc != 0:
        tmp.unlink(missing_ok=True)
        raise QuantizeFailed(f"llama.cpp could not quantize {src} to {spec.mix} (code {rc})")
    tmp.replace(dst)
    return dst


def requantize(src: str | Path, dst: str | Path, ftype: str, threads: int = 0) -> Path:
    """Write ``src`` to ``dst`` with every matrix in ``ftype`` (f32, f16, q8_0, q4_0)."""
    global _quiet
    if ftype not in FTYPES:
        raise ValueError(f"unknown file type {ftype!r}: use one of {', '.join(FTYPES)}")
    _quiet = lc.llama_log_callback(lambda level, text, user: None)
    lc.llama_log_set(_quiet, ctypes.c_void_p(0))
    params = lc.llama_model_quantize_default_params()
    params.ftype, tensor_type = FTYPES[ftype]
    params.allow_requantize = True
    params.nthread = threads
    params.output_tensor_type = params.token_embedding_type = tensor_type
    dst = Path(dst)
    tmp = dst.with_name(dst.name + ".part")
    rc = lc.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
    if rc != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"llama_model_quantize failed with {rc} for {src}")
    tmp.replace(dst)
    return dst


def requantized(src: str | Path, ftype: str, folder: str | Path) -> Path:
    """``src`` in ``ftype``, cached in ``folder`` (made once, reused while newer than ``src``)."""
    src = Path(src)
    dst = Path(folder) / f"{src.stem}.{ftype.upper()}.gguf"
    if dst.is_file() and dst.stat().st_mtime >= src.stat().st_mtime:
        return dst
    dst.parent.mkdir(parents=True, exist_ok=True)
    return requantize(src, dst, ftype)
