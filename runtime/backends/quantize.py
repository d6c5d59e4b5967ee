"""Re-quantize a GGUF with llama.cpp's quantizer (``llama_model_quantize``).

Used to make a heavier copy of a model for speculative decoding (an F32 target over the
same function as its Q4_K_M draft) and by tests.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import llama_cpp as lc

#: file types by name -> (llama_ftype, ggml type of the output and embedding tensors)
FTYPES = {"f32": (lc.LLAMA_FTYPE_ALL_F32, 0), "f16": (lc.LLAMA_FTYPE_MOSTLY_F16, 1),
          "q8_0": (lc.LLAMA_FTYPE_MOSTLY_Q8_0, 8), "q4_0": (lc.LLAMA_FTYPE_MOSTLY_Q4_0, 2)}

_quiet = None


def requantize(src: str | Path, dst: str | Path, ftype: str, threads: int = 0) -> Path:
    """Write ``src`` to ``dst`` with every matrix in ``ftype`` (f32, f16, q8_0, q4_0)."""
    global _quiet  # C keeps only the pointer: the callback must outlive the call
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
