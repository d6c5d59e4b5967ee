"""The fit plan's multi-GPU placement reaches llama.cpp's model parameters: split mode, main
GPU and the tensor split array (a CPU-only build takes them and places nothing on a GPU)."""

from __future__ import annotations

import pytest

from runtime.backends.errors import ModelLoadError
from runtime.backends.gpu_split import set_split
from runtime.backends.llama import ContextConfig, LlamaBackend


def test_the_split_reaches_the_model_params():
    import llama_cpp as lc

    params = lc.llama_model_default_params()
    arr = set_split(params, ContextConfig(split_mode="row", tensor_split=[0.75, 0.25], main_gpu=1))
    assert params.split_mode == lc.LLAMA_SPLIT_MODE_ROW and params.main_gpu == 1
    assert [params.tensor_split[i] for i in range(3)] == [0.75, 0.25, 0.0] and len(arr) == lc.llama_max_devices()
    with pytest.raises(ModelLoadError):
        set_split(params, ContextConfig(split_mode="diagonal"))


def test_a_model_loads_with_a_tensor_split(smollm2_path):
    backend = LlamaBackend(smollm2_path, ContextConfig(n_ctx=512, n_seq_max=1, tensor_split=[0.5, 0.5],
                                                       split_mode="layer"))
    try:
        assert backend.tokenize("Hello")
    finally:
        backend.close()

