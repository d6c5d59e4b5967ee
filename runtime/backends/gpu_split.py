"""Several GPUs: the fit plan's split of a model, written into llama.cpp's model parameters."""

from __future__ import annotations

import ctypes

import llama_cpp as lc

from runtime.backends.errors import ModelLoadError

SPLIT_MODES = {"none": lc.LLAMA_SPLIT_MODE_NONE, "layer": lc.LLAMA_SPLIT_MODE_LAYER, "row": lc.LLAMA_SPLIT_MODE_ROW}


def set_split(mparams, config) -> ctypes.Array | None:
    """Put the plan's split mode, main GPU and tensor split (a ``ContextConfig``'s) into llama.cpp's
    model parameters; returns the tensor-split array, which must outlive the model's load."""
    try:
        mparams.split_mode = SPLIT_MODES[config.split_mode]
    except KeyError:
        raise ModelLoadError(f"unknown split mode {config.split_mode!r}: use none, layer or row") from None
    mparams.main_gpu = int(config.main_gpu)
    if not config.tensor_split:
        return None
    n = int(lc.llama_max_devices())
    shares = [float(x) for x in config.tensor_split][:n]
    arr = (ctypes.c_float * n)(*(shares + [0.0] * (n - len(shares))))
    mparams.tensor_split = ctypes.cast(arr, ctypes.POINTER(ctypes.c_float))
    return arr
