"""Several GPUs in one machine, on recorded device lists (2 x 24 GB, 24 GB + 8 GB, 4 x 80 GB):
the planner splits the offloaded layers in proportion to each GPU's free memory less its
reserve, every GPU's part fits it, and the tensor split it hands llama.cpp places the layers
where the plan counted them (llama.cpp's rule: layer ``il`` of the offloaded ``act`` goes to
the first GPU whose cumulative share exceeds ``il / act``)."""

from __future__ import annotations

import sys
import types
from itertools import accumulate

import pytest

from runtime.hardware.fit import GPU_RESERVE_BYTES, plan_fit
from runtime.hardware.gpus import machine_gpus, parse_nvidia_smi
from runtime.hardware.report import format_fit_report
from runtime.hardware.catalog_shape import shape_from_numbers
from tests.hardware import recorded as rec

GIB = 1 << 30
QWEN_32B_Q4_K_M = dict(
    name="Qwen2.5 32B Q4_K_M", architecture="qwen2", file_bytes=19_851_336_256, n_layer=64, n_head=40,
    n_head_kv=8, head_dim=128, n_embd=5120, n_vocab=152064, ctx_train=32768, n_ff=27648,
)
QWEN_32B_Q6_K = {**QWEN_32B_Q4_K_M, "name": "Qwen2.5 32B Q6_K", "file_bytes": 26_886_154_560}
LLAMA_70B_Q8_0 = dict(
    name="Llama 3.1 70B Q8_0", architecture="llama", file_bytes=74_975_064_064, n_layer=80, n_head=64,
    n_head_kv=8, head_dim=128, n_embd=8192, n_vocab=128256, ctx_train=131072, n_ff=28672,
)


def llama_cpp_layers(n_layer: int, n_gpu_layers: int, tensor_split: list[float]) -> list[int]:
    """Layers (the output counted) per GPU as llama.cpp places them for this tensor split."""
    total = sum(tensor_split)
    bounds = [b / total for b in accumulate(tensor_split)]
    start, act = max(n_layer + 1 - n_gpu_layers, 0), min(n_gpu_layers, n_layer + 1)
    counts = [0] * len(tensor_split)
    for il in range(start, start + act):
        frac = (il - start) / act
        counts[next((i for i, b in enumerate(bounds) if frac < b), len(bounds) - 1)] += 1
    return counts


def check_split(plan, devices) -> list[int]:
    gpus = [d for d in plan.devices if d.name != "CPU"]
    free = [d.memory_free for d in devices]
    shares = [max(f - GPU_RESERVE_BYTES, 0) for f in free]
    assert plan.split_mode == "layer"
    assert plan.tensor_split == [round(s / sum(shares), 4) for s in shares]
    counts = [len(d.layers) + d.output for d in gpus]
    assert counts == llama_cpp_layers(plan.layers_total - 1, plan.gpu_layers, plan.tensor_split)
    for d, f in zip(gpus, free):
        assert int(d.total * 1.1) + GPU_RESERVE_BYTES <= f, d.name
    assert plan.main_gpu == max(range(len(free)), key=lambda i: free[i])
    return counts


def test_a_32b_model_needs_both_24gb_gpus_and_gets_half_of_its_layers_on_each():
    shape = shape_from_numbers(**QWEN_32B_Q6_K)
    one = plan_fit(shape, rec.machine([rec.RTX_4090], 64 * GIB, 60 * GIB), ctx=8192)
    assert one.verdict == "partial" and one.split_mode == "none" and one.tensor_split == []
    two = plan_fit(shape, rec.machine(rec.TWO_4090, 64 * GIB, 60 * GIB), ctx=8192)
    assert (two.verdict, two.gpu_layers, two.ctx) == ("gpu", 65, 8192)
    assert check_split(two, rec.TWO_4090) == [33, 32]
    assert [d.name for d in two.devices] == ["CPU", "CUDA0", "CUDA1"]
    report = format_fit_report(two)
    assert "CUDA0:" in report and "CUDA1:" in report and "tensor_split=0.5,0.5" in report


def test_24gb_and_8gb_split_three_to_one():
    shape = shape_from_numbers(**QWEN_32B_Q4_K_M)
    plan = plan_fit(shape, rec.machine(rec.A_4090_AND_A_4060, 64 * GIB, 60 * GIB), ctx=4096)
    assert plan.verdict == "gpu"
    counts = check_split(plan, rec.A_4090_AND_A_4060)
    assert counts == [50, 15] and plan.tensor_split == [0.76, 0.24]
    assert any("split across 2 GPUs by layers" in n for n in plan.notes)


def test_four_80gb_gpus_hold_a_70b_q8_model_a_quarter_each():
    shape = shape_from_numbers(**LLAMA_70B_Q8_0)
    plan = plan_fit(shape, rec.machine(rec.FOUR_H100, 512 * GIB, 480 * GIB), ctx=32768)
    assert (plan.verdict, plan.gpu_layers, plan.ctx) == ("gpu", 81, 32768)
    assert plan.tensor_split == [0.25] * 4
    assert check_split(plan, rec.FOUR_H100) == [21, 20, 20, 20]
    assert plan.to_dict()["tensor_split"] == [0.25] * 4 and len(plan.to_dict()["devices"]) == 5


def test_a_full_gpu_gets_no_layers_and_the_other_one_is_the_main_gpu():
    devices = [rec.RTX_3060_FULL, rec.RTX_4090_B]
    plan = plan_fit(shape_from_numbers(**QWEN_32B_Q4_K_M), rec.machine(devices, 64 * GIB, 60 * GIB), ctx=4096)
    assert plan.split_mode == "none" and plan.main_gpu == 1 and plan.tensor_split == []
    assert [d.name for d in plan.devices] == ["CPU", "CUDA1"]


def test_row_split_only_where_the_backend_has_it():
    shape = shape_from_numbers(**QWEN_32B_Q4_K_M)
    assert plan_fit(shape, rec.machine(rec.TWO_4090, 64 * GIB, 60 * GIB), ctx=4096, split_mode="row").split_mode == "row"
    vulkan = [rec.GgmlDevice(i, f"Vulkan{i}", "NVIDIA GeForce RTX 4090", "gpu", "Vulkan", 24564 << 20, 23592 << 20)
              for i in range(2)]
    plan = plan_fit(shape, rec.machine(vulkan, 64 * GIB, 60 * GIB), ctx=4096, split_mode="row")
    assert plan.split_mode == "layer" and any("only by CUDA" in n for n in plan.notes)
    with pytest.raises(ValueError):
        plan_fit(shape, rec.machine(vulkan, 64 * GIB, 60 * GIB), split_mode="diagonal")


def test_the_probe_lists_every_gpu_from_nvidia_smi_and_nvml(monkeypatch):
    four = parse_nvidia_smi(rec.NVIDIA_SMI_FOUR_H100)
    assert len(four) == 4 and all(g.memory_free == 81008 << 20 and not g.usable for g in four)
    assert [g.name for g in parse_nvidia_smi(rec.NVIDIA_SMI_4090_4060)] == ["NVIDIA GeForce RTX 4090",
                                                                            "NVIDIA GeForce RTX 4060"]
    # NVML as pynvml shapes it: names as str (bytes before 11.5), memory as c_nvmlMemory_t in bytes
    memory = {0: (25757220864, 24738004992), 1: (8585740288, 8178892800)}
    names = {0: b"NVIDIA GeForce RTX 4090", 1: "NVIDIA GeForce RTX 4060"}
    nvml = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetName=lambda h: names[h],
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=memory[h][0], free=memory[h][1],
                                                                used=memory[h][0] - memory[h][1]))
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    found = machine_gpus([], "Windows", "AMD64", "x", 64 * GIB, 60 * GIB)
    assert [(g.name, g.memory_free, g.source) for g in found] == [
        ("NVIDIA GeForce RTX 4090", 24738004992, "nvml"), ("NVIDIA GeForce RTX 4060", 8178892800, "nvml")]
    usable = machine_gpus(rec.FOUR_H100, "Linux", "x86_64", "x", 512 * GIB, 480 * GIB)
    assert [g.device for g in usable] == ["CUDA0", "CUDA1", "CUDA2", "CUDA3"]
