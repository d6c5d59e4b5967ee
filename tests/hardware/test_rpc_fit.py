"""RPC workers' devices in the fit plan, on recorded device lists: without a local GPU the
layers are shared between this machine's RAM and the workers by free memory, each part fits
where it goes, and the tensor split places the layers where the plan counted them (llama.cpp's
rule, ``llama_cpp_layers``); the workers come first in the device order, as in llama.cpp."""

from __future__ import annotations

from runtime.backends.ggml_devices import GgmlDevice
from runtime.hardware.fit import RAM_RESERVE_BYTES, RPC_RESERVE_BYTES, plan_fit
from runtime.hardware.gpus import gpus_from_ggml
from runtime.hardware.memory import GPU_HOST_OVERHEAD_BYTES
from runtime.hardware.report import format_fit_report
from runtime.hardware.catalog_shape import shape_from_numbers
from tests.hardware import recorded as rec
from tests.hardware.test_multi_gpu import QWEN_32B_Q4_K_M, llama_cpp_layers

GIB = 1 << 30


def rpc(index: int, endpoint: str, free: int) -> GgmlDevice:
    """An RPC worker's device as ggml lists it: type GPU, description the endpoint."""
    return GgmlDevice(index, f"RPC{index}", endpoint, "gpu", "RPC", free, free)


def remote_counts(plan) -> list[int]:
    return [len(d.layers) + d.output for d in plan.devices[1:]]


def test_two_workers_and_this_machine_share_a_32b_model_by_free_memory():
    shape = shape_from_numbers(**QWEN_32B_Q4_K_M)
    workers = [rpc(0, "10.0.0.2:50052", 8 * GIB), rpc(1, "10.0.0.3:50052", 8 * GIB)]
    alone = plan_fit(shape, rec.machine([], 16 * GIB, 12 * GIB), ctx=4096)
    assert alone.verdict == "too_big"
    plan = plan_fit(shape, rec.machine(workers, 16 * GIB, 12 * GIB), ctx=4096)
    assert plan.fits and plan.verdict == "partial" and plan.ctx == 4096
    assert plan.rpc == ["10.0.0.2:50052", "10.0.0.3:50052"]
    assert [d.name for d in plan.devices] == ["CPU", "RPC0", "RPC1"]
    remote = 2 * (8 * GIB - RPC_RESERVE_BYTES)
    local = 12 * GIB - RAM_RESERVE_BYTES
    assert plan.gpu_layers == round(65 * remote / (remote + local))  # 37 of 65
    assert plan.split_mode == "layer" and plan.tensor_split == [0.5, 0.5]
    counts = remote_counts(plan)
    assert counts == llama_cpp_layers(64, plan.gpu_layers, plan.tensor_split)
    assert sum(counts) == plan.gpu_layers and abs(counts[0] - counts[1]) <= 1
    for d in plan.devices[1:]:
        assert int(d.total * 1.1) + RPC_RESERVE_BYTES <= 8 * GIB, d.name
    assert int(plan.ram_bytes * 1.1) + RAM_RESERVE_BYTES <= 12 * GIB
    assert "split across 2 devices by layers: RPC0 (10.0.0.2:50052)" in " ".join(plan.notes)
    assert "RPC0" in format_fit_report(plan)
    assert plan.devices[0].overhead < GPU_HOST_OVERHEAD_BYTES  # no GPU runtime on this machine


def test_a_worker_with_three_times_the_memory_takes_three_times_the_layers():
    shape = shape_from_numbers(**QWEN_32B_Q4_K_M)
    workers = [rpc(0, "10.0.0.2:50052", 4 * GIB + RPC_RESERVE_BYTES),
               rpc(1, "10.0.0.3:50052", 12 * GIB + RPC_RESERVE_BYTES)]
    plan = plan_fit(shape, rec.machine(workers, 32 * GIB, 16 * GIB + RAM_RESERVE_BYTES), ctx=4096)
    assert plan.fits and plan.tensor_split == [0.25, 0.75]
    assert plan.gpu_layers == round(65 * 16 / 32)
    counts = remote_counts(plan)
    assert counts == llama_cpp_layers(64, plan.gpu_layers, plan.tensor_split)
    assert 2.5 <= counts[1] / counts[0] <= 3.5


def test_when_this_machine_cannot_hold_its_share_the_workers_take_more():
    shape = shape_from_numbers(**QWEN_32B_Q4_K_M)
    workers = [rpc(0, "10.0.0.2:50052", 16 * GIB), rpc(1, "10.0.0.3:50052", 16 * GIB)]
    # by free memory this machine's share would be a third, about 6.6 GB of weights: 4 GB is less
    plan = plan_fit(shape, rec.machine(workers, 8 * GIB, 4 * GIB), ctx=4096)
    assert plan.fits
    assert plan.gpu_layers > round(65 * 2 / 3)
    assert int(plan.ram_bytes * 1.1) + RAM_RESERVE_BYTES <= 4 * GIB


def test_too_little_memory_everywhere_is_too_big_and_says_so():
    shape = shape_from_numbers(**QWEN_32B_Q4_K_M)
    workers = [rpc(0, "10.0.0.2:50052", 2 * GIB), rpc(1, "10.0.0.3:50052", 2 * GIB)]
    plan = plan_fit(shape, rec.machine(workers, 8 * GIB, 6 * GIB), ctx=4096)
    assert plan.verdict == "too_big" and plan.message


def test_beside_a_local_gpu_the_workers_come_first_and_fill_like_gpus():
    workers = [rpc(0, "10.0.0.2:50052", 24 * GIB)]
    gpus = gpus_from_ggml([rec.RTX_4090, *workers])
    assert [(g.device, g.remote) for g in gpus] == [("RPC0", True), ("CUDA0", False)]
    assert gpus[0].name == "10.0.0.2:50052" and gpus[0].source == "rpc"
    shape = shape_from_numbers(**QWEN_32B_Q4_K_M)
    plan = plan_fit(shape, rec.machine([rec.RTX_4090, *workers], 64 * GIB, 60 * GIB), ctx=4096)
    assert plan.verdict == "gpu" and plan.gpu_layers == 65
    assert plan.rpc == ["10.0.0.2:50052"]
    assert [d.name for d in plan.devices] == ["CPU", "RPC0", "CUDA0"]
    assert plan.tensor_split[0] > plan.tensor_split[1]  # 24 GiB lent against 23 GiB free
    assert plan.devices[0].overhead > GPU_HOST_OVERHEAD_BYTES  # CUDA's host side counts here


def test_a_small_model_beside_workers_still_keeps_a_part_here():
    smol = shape_from_numbers(name="SmolLM2 135M", architecture="llama", file_bytes=93_000_000, n_layer=30,
                              n_head=9, n_head_kv=3, head_dim=64, n_embd=576, n_vocab=49152, ctx_train=8192,
                              n_ff=1536)
    mem = 512 << 20
    workers = [rpc(0, "127.0.0.1:50071", mem), rpc(1, "127.0.0.1:50072", mem)]
    plan = plan_fit(smol, rec.machine(workers, 4 * GIB, mem + RAM_RESERVE_BYTES - RPC_RESERVE_BYTES), ctx=2048)
    assert plan.fits and plan.gpu_layers == round(31 * 2 / 3)
    counts = remote_counts(plan)
    assert counts == llama_cpp_layers(30, plan.gpu_layers, plan.tensor_split) and min(counts) > 0
