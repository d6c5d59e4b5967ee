"""A mixture-of-experts model's experts kept in host memory through llama.cpp's tensor buffer
overrides (``ContextConfig.cpu_moe_layers``, as ``--n-cpu-moe``).

On a CPU-only machine every tensor is in host memory either way, but the override still runs
through llama.cpp's loader (the CPU buffer type compared by pointer, the pattern searched in
every tensor's name): its debug log names each tensor it moved, and the model must load and
decode the same greedy tokens as without it.
"""

from __future__ import annotations

import ctypes
import re

import llama_cpp as lc
import pytest

import runtime.backends.llama as llama_module
from runtime.backends.gpu_split import expert_pattern
from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.hardware.shape import shape_from_gguf
from runtime.store.gguf_file import read_header
from tests.backends.test_llama_backend import greedy
from tests.moe_models import TinyMoe, write_tiny_gpt_oss, write_tiny_qwen3moe

PROMPT = [5, 6, 7, 8, 9, 10]  # token ids: the tiny vocabulary has no byte tokens to tokenize text with
OVERRIDDEN = re.compile(r"tensor (\S+) \(.*\) buffer type overridden to CPU")


@pytest.fixture()
def loader_log(monkeypatch):
    """llama.cpp's log lines while a backend loads (the backend otherwise silences them)."""
    lines: list[str] = []
    callback = lc.llama_log_callback(lambda level, text, user: lines.append(text.decode(errors="replace")))
    monkeypatch.setattr(llama_module, "_silence_llama_log", lambda: lc.llama_log_set(callback, ctypes.c_void_p(0)))
    yield lines
    monkeypatch.undo()
    llama_module._silence_llama_log()  # C must not keep the pointer to this test's callback


@pytest.fixture(scope="module", params=["qwen3moe", "gpt-oss"])
def moe_path(request, tmp_path_factory):
    write = write_tiny_qwen3moe if request.param == "qwen3moe" else write_tiny_gpt_oss
    return write(tmp_path_factory.mktemp("moe") / f"tiny-{request.param}.gguf")


def run(path, cpu_moe_layers: int) -> tuple[list[int], int]:
    b = LlamaBackend(path, ContextConfig(n_ctx=512, n_seq_max=1, n_batch=64, cpu_moe_layers=cpu_moe_layers))
    try:
        return greedy(b, PROMPT, 16), b.info.size_bytes
    finally:
        b.close()


def test_experts_in_host_memory_decode_the_same_greedy_tokens(moe_path, loader_log):
    n_layer = TinyMoe().n_layer
    shape = shape_from_gguf(moe_path)
    expert_names = {t.name for t in read_header(moe_path).tensors if "_exps." in t.name}
    reference, size = run(moe_path, 0)
    assert len(set(reference)) > 4  # random weights, not a constant output
    assert size == shape.weights_bytes  # what the planner counts is what llama.cpp allocates
    assert not any(OVERRIDDEN.search(line) for line in loader_log)
    for n in (2, n_layer):
        loader_log.clear()
        tokens, _ = run(moe_path, n)
        moved = {m.group(1) for line in loader_log if (m := OVERRIDDEN.search(line))}
        assert moved == {name for name in expert_names if int(name.split(".")[1]) < n}
        assert tokens == reference


def test_the_pattern_takes_the_routed_experts_of_the_first_layers_only():
    pattern = re.compile(expert_pattern(2))  # std::regex (ECMAScript) reads it as Python does
    hits = ["blk.0.ffn_up_exps.weight", "blk.1.ffn_down_exps.weight", "blk.1.ffn_gate_exps.bias",
            "blk.0.ffn_gate_up_exps.weight", "blk.1.ffn_up_chexps.weight"]
    misses = ["blk.2.ffn_up_exps.weight", "blk.10.ffn_up_exps.weight", "blk.11.ffn_down_exps.weight",
              "blk.0.ffn_up_shexp.weight", "blk.0.ffn_gate_inp.weight", "blk.1.attn_q.weight",
              "blk.0.ffn_up.weight"]
    assert all(pattern.search(n) for n in hits) and not any(pattern.search(n) for n in misses)
