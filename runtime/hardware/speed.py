"""Decode speed predicted from the bytes one token reads on each device and its bandwidth.

One step takes, on each device, the bytes it reads (its weights plus the KV cache of 512
filled cells; of a MoE layer's routed experts only the share a token uses,
``expert_used_count / expert_count``) over its bandwidth times an efficiency, plus on the CPU
a fixed cost per step when it runs any layer or expert. The CPU's efficiency and fixed cost
are measured on this machine (``runtime.hardware.calibrate``); a GPU's efficiency is taken as
0.6 of its published bandwidth (uncalibrated).

Attention on the CPU goes through a layer's K and V rows once per query head, not once per KV
head: with grouped-query attention (32 query heads on 4 KV heads in Qwen3-30B-A3B) a filled cell
costs ``n_head / n_head_kv`` times its bytes. Measured on a generated Qwen3-MoE at 0.9B active
parameters (2 threads): decode fell from 26 to 17 tokens/s between 64 and 1,500 filled cells,
15 ms more per token where the cache's bytes alone say 2; counted per query head, 14.

The memory wall (``decode_limit``) is the same arithmetic with nothing but the bytes: each
device's bytes per token over its full bandwidth (this machine's measured copy bandwidth for
RAM, the published one for a GPU): a stream decodes faster only where memory reads faster than
that measure. The ratio of a measured speed to it says how much of the machine the engine uses.
"""

from __future__ import annotations

from runtime.hardware.gpus import GpuInfo
from runtime.hardware.info import HardwareInfo
from runtime.hardware.memory import DeviceMemory, Settings, bytes_per_token, kv_type_bytes, layer_cells, pad_ctx
from runtime.hardware.shape import ModelShape

PREDICT_AT_CELLS = 512
DEFAULT_GPU_EFFICIENCY = 0.6
#: used before this machine is calibrated: about what runtime.hardware.calibrate found on a
#: 2-core x86 VM (0.38 of a 36 GB/s copy bandwidth, 5 ms a step)
DEFAULT_CPU_EFFICIENCY = 0.35
DEFAULT_CPU_FIXED_S = 0.005
DEFAULT_HOST_BANDWIDTH = 20e9


def predict_decode(shape: ModelShape, hw: HardwareInfo, s: Settings, cpu: DeviceMemory,
                   gpus: list[DeviceMemory], gpu_infos: list[GpuInfo]) -> tuple[float, bool]:
    """Tokens per second of one stream placed as ``cpu`` and ``gpus`` say, and whether the
    prediction is calibrated (measured on this machine, with nothing on a GPU)."""
    filled = min(PREDICT_AT_CELLS, s.ctx)
    cpu_b, gpu_b = bytes_per_token(shape, s, cpu, gpus, filled)
    host_bw = hw.memory_bandwidth or DEFAULT_HOST_BANDWIDTH
    eff = hw.decode_efficiency or DEFAULT_CPU_EFFICIENCY
    seconds = (cpu_b + grouped_attention_bytes(shape, s, cpu.layers, pad_ctx(filled))) / (host_bw * eff)
    if cpu.layers or cpu.experts:  # the fixed step cost was measured with every layer on the CPU
        seconds += hw.decode_fixed_s if hw.decode_efficiency else DEFAULT_CPU_FIXED_S
    for g, b in zip(gpu_infos, gpu_b):
        seconds += b / (g.bandwidth * DEFAULT_GPU_EFFICIENCY)
    return 1 / seconds, hw.decode_efficiency is not None and not any(gpu_b)


def grouped_attention_bytes(shape: ModelShape, s: Settings, layers: list[int] | range, filled: int) -> float:
    """What the CPU's attention reads of ``layers``' KV cache beyond its bytes with ``filled``
    cells in use (padded as llama.cpp pads them, like ``bytes_per_token``): each KV head's rows
    once more for every further query head of its group."""
    per = kv_type_bytes(s.kv_type)
    cells = layer_cells(shape, s)
    extra = 0.0
    for il in layers:
        kv_heads = shape.n_head_kv[il]
        if kv_heads and shape.n_head > kv_heads:
            extra += shape.kv_bytes_per_cell(il, per) * min(cells[il], filled) * (shape.n_head / kv_heads - 1)
    return extra


def decode_limit(shape: ModelShape, hw: HardwareInfo, s: Settings, cpu: DeviceMemory, gpus: list[DeviceMemory],
                 gpu_infos: list[GpuInfo], filled: int = PREDICT_AT_CELLS) -> float | None:
    """The most tokens per second one stream can decode placed as ``cpu`` and ``gpus`` say, with
    ``filled`` cells of its KV cache in use: the bytes a token reads on each device (its weights,
    of a MoE layer's routed experts only the share a token uses, and the KV cache) over that
    device's bandwidth. None when the CPU reads weights and RAM's bandwidth is not measured."""
    cpu_b, gpu_b = bytes_per_token(shape, s, cpu, gpus, min(filled, s.ctx))
    seconds = 0.0
    if cpu_b:
        if not hw.memory_bandwidth:
            return None
        seconds += cpu_b / hw.memory_bandwidth
    for g, b in zip(gpu_infos, gpu_b):
        if b and not g.bandwidth:
            return None
        seconds += b / g.bandwidth if b else 0.0
    return 1 / seconds if seconds else None
