"""The fit plan's split of a model, written into llama.cpp's model parameters: several GPUs
(split mode, main GPU, tensor split), and a mixture-of-experts model's experts kept in RAM."""

from __future__ import annotations

import ctypes

import llama_cpp as lc

from runtime.backends.errors import ModelLoadError
from runtime.backends.ggml_base import ggml
from runtime.store.gguf_file import EXPERT_TENSORS

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


class TensorBuftOverride(ctypes.Structure):
    """llama.h's ``struct llama_model_tensor_buft_override`` (the bindings leave the field untyped)."""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def cpu_buffer_type() -> int:
    """``ggml_backend_cpu_buffer_type()`` of the libggml-base that libllama loaded: the pointer
    llama.cpp's loader compares an override with to place a tensor in host memory (where it
    may still be repacked for the CPU, as with ``--n-cpu-moe``)."""
    fn = ctypes.CFUNCTYPE(ctypes.c_void_p)(("ggml_backend_cpu_buffer_type", ggml()))
    buft = fn()
    if not buft:
        raise ModelLoadError("ggml has no CPU buffer type: llama-cpp-python looks broken; reinstall it")
    return int(buft)


def expert_pattern(n_layers: int) -> str:
    """The regular expression (std::regex, searched in each tensor's name) that matches the routed
    experts of layers 0 .. n_layers - 1, as llama.cpp's ``--n-cpu-moe n_layers`` does."""
    return rf"^blk\.({'|'.join(str(il) for il in range(n_layers))}){EXPERT_TENSORS}"


def set_cpu_experts(mparams, n_layers: int) -> ctypes.Array | None:
    """Keep the routed experts of the first ``n_layers`` layers in host memory whatever
    ``n_gpu_layers`` offloads (tensor buffer overrides); returns the NULL-terminated override
    array, which holds the pattern and must live as long as the model."""
    if n_layers <= 0:
        return None
    arr = (TensorBuftOverride * 2)()
    arr[0].pattern = expert_pattern(n_layers).encode()  # the array keeps the bytes alive
    arr[0].buft = cpu_buffer_type()
    mparams.tensor_buft_overrides = ctypes.cast(arr, ctypes.c_void_p)
    return arr
