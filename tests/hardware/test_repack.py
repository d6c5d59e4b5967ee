"""The CPU backend's repacked weights in the plan: llama.cpp keeps an interleaved copy of the
matrices its CPU kernels want (``runtime.hardware.repack``) beside the mapped file. Checked against
the buffer llama.cpp itself reports when it loads the shipped Gemma 3 270M (Q4_K_M)."""

from __future__ import annotations

import ctypes
import re

import llama_cpp as lc
import pytest

import runtime.backends.llama as llama_module
from runtime.backends.amx import amx_advertised
from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.hardware.cpu import cpu_info
from runtime.hardware.fit import plan_fit
from runtime.hardware.memory import Settings, estimate
from runtime.hardware.repack import IQ4_NL, Q2_K, Q4_0, Q4_K, Q6_K, Q8_0, repack_rules
from runtime.hardware.shape import shape_from_gguf
from tests.hardware import recorded as rec

REPACK_LINE = re.compile(r"CPU_REPACK model buffer size =\s+([0-9.]+) MiB")


def test_the_rules_follow_the_cpu_features():
    assert repack_rules(["AVX", "AVX2", "FMA"]) == {Q4_0: 8, Q4_K: 8, IQ4_NL: 8, 39: 8}
    assert Q2_K in repack_rules(["AVX2", "AVX-512"])
    assert repack_rules(["AVX2", "AMX (advertised)"]) == {}  # Hearth turns the extra buffers off there
    arm = repack_rules(["NEON", "DOTPROD", "I8MM"])
    assert arm[Q4_0] == 4 and arm[Q6_K] == 8 and arm[Q8_0] == 4 and arm[IQ4_NL] == 4
    assert repack_rules(["NEON"]) == {} and repack_rules([]) == {}


@pytest.mark.skipif(amx_advertised() or "AVX2" not in cpu_info().features,
                    reason="llama.cpp repacks Q4_K for the CPU only with AVX2 (and Hearth turns it off with AMX)")
def test_the_planned_copy_is_what_llama_cpp_allocates(gemma_path, monkeypatch):
    lines: list[str] = []
    callback = lc.llama_log_callback(lambda level, text, user: lines.append(text.decode(errors="replace")))
    monkeypatch.setattr(llama_module, "_silence_llama_log", lambda: lc.llama_log_set(callback, ctypes.c_void_p(0)))
    try:
        LlamaBackend(gemma_path, ContextConfig(n_ctx=512, n_seq_max=1, n_batch=64)).close()
    finally:
        monkeypatch.undo()
        llama_module._silence_llama_log()
    reported = next(float(m.group(1)) for line in lines if (m := REPACK_LINE.search(line)))
    shape = shape_from_gguf(gemma_path)
    planned = shape.repack_bytes(repack_rules(cpu_info().features), range(shape.n_layer), True) / (1 << 20)
    assert planned == pytest.approx(reported, rel=0.01), (planned, reported)
    assert planned > 0


def test_the_plan_counts_the_copy_on_the_cpu_and_not_for_offloaded_layers(gemma_path, smollm2_path):
    gemma = shape_from_gguf(gemma_path)  # Q4_K_M: its Q4_K matrices are repacked with AVX2
    s = Settings(2048, "f16", 1, 512)
    cpu, _ = estimate(gemma, s, repack=repack_rules(["AVX2"]))
    bare, _ = estimate(gemma, s)
    assert cpu.repack > 0 and cpu.total == bare.total + cpu.repack
    plan = plan_fit(gemma, rec.machine([], 16 * rec.GIB, 12 * rec.GIB))  # the recorded CPU has AVX2
    assert plan.repacked_bytes == cpu.repack and plan.ram_bytes >= bare.total + cpu.repack
    on_gpu, _ = estimate(gemma, s, n_gpu_layers=gemma.n_layer + 1, gpus=[("CUDA0", 8e9)], repack=repack_rules(["AVX2"]))
    assert on_gpu.repack == 0  # every layer and the output on the GPU: nothing for the CPU kernels
    smol = shape_from_gguf(smollm2_path)  # Q4_1: no repacking kernel for it
    assert estimate(smol, s, repack=repack_rules(["AVX2"]))[0].repack == 0


def test_a_catalog_model_is_planned_with_its_copy_before_the_download():
    """Before a download only the quantization's name is known: a Q4_K_M Llama 3.2 1B is planned
    with about the copy a file of that shape made (445.5 MiB, bench/real_shapes.py), a Q8_0 with none."""
    from runtime.hardware.model_shape import catalog_shape
    from runtime.store.catalog import load_catalog

    entry = load_catalog()["llama-3.2-1b"]
    q4 = catalog_shape(entry, "Q4_K_M")
    assert q4 is not None
    repacked = q4.repack_bytes(repack_rules(["AVX2"]), range(q4.n_layer), True) / (1 << 20)
    assert repacked == pytest.approx(445.5, rel=0.15)
    q8 = catalog_shape(entry, "Q8_0")
    assert q8 is not None and q8.repack_bytes(repack_rules(["AVX2"]), range(q8.n_layer), True) == 0
    assert repack_rules(["AVX2"]) and plan_fit(q4, rec.machine([], 16 * rec.GIB, 12 * rec.GIB)).repacked_bytes > 0
