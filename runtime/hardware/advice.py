"""The words of a fit plan: what runs where, and for a model that does not fit, the way out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtime.hardware.memory import SAFETY_FRACTION

if TYPE_CHECKING:
    from runtime.hardware.fit import FitPlan
    from runtime.hardware.gpus import GpuInfo
    from runtime.hardware.shape import ModelShape

GIB = 1 << 30
#: (name, bits per weight) of smaller llama.cpp quantizations to suggest, largest first
QUANTS = [("Q6_K", 6.56), ("Q5_K_M", 5.69), ("Q4_K_M", 4.85), ("Q3_K_M", 3.91), ("Q2_K", 3.0)]


@dataclass(slots=True)
class Shortfall:
    """A device a plan does not fit on."""

    resource: str  #: "RAM" or the GPU's name
    need: int  #: bytes, margins included
    free: int
    weights: int  #: the model's weights on that device


def gb(n: int | float) -> str:
    """Bytes as GB (GiB, as operating systems count them), one decimal."""
    return f"{n / GIB:.1f} GB"


def _tps(plan: FitPlan) -> str:
    if plan.predicted_tokens_per_s is None:
        return ""
    return f" About {plan.predicted_tokens_per_s:.0f} tokens/s." if plan.predicted_tokens_per_s >= 10 \
        else f" About {plan.predicted_tokens_per_s:.1f} tokens/s."


def _gpu_names(gpus: list[GpuInfo]) -> str:
    return ", ".join(dict.fromkeys(g.name for g in gpus))


def quant_way(shape: ModelShape, s: Shortfall) -> str | None:
    """The largest smaller quantization whose weights would make ``s`` fit, or None."""
    bpw = shape.bits_per_weight
    for name, q in QUANTS:
        if q >= bpw - 0.25:
            continue
        saved = s.weights * (1 - q / bpw) * (1 + SAFETY_FRACTION)
        if s.need - saved <= s.free:
            return f"choose {name} (about {gb(shape.weights_bytes * q / bpw)} of weights)"
    return None


def _ways_out(plan: FitPlan, shape: ModelShape, s: Shortfall) -> str:
    ways = []
    quant = quant_way(shape, s)
    if quant:
        ways.append(quant)
    if plan.kv_type == "f16" and plan.kv_bytes > 0.2 * plan.total_bytes:
        ways.append("a q8_0 KV cache (half the KV memory)")
    if not quant:
        ways.append("a smaller model")
    if s.resource == "RAM":
        ways.append("or close other programs to free memory")
    return ", ".join(ways)


def _summary(plan: FitPlan, gpus: list[GpuInfo]) -> str:
    used = [g for g in gpus if any(d.name == (g.device or g.name) for d in plan.devices)]
    names = _gpu_names(used or gpus)
    free = sum(g.memory_free for g in (used or gpus))
    layers = plan.layers_total
    if plan.verdict == "gpu":
        return (f"{plan.model} fits on the GPU ({names}): all {layers} layers, context {plan.ctx}, "
                f"{gb(plan.gpu_bytes)} of {gb(free)} free.{_tps(plan)}")
    if plan.verdict == "partial" and plan.cpu_moe_layers:
        return (f"{plan.model} fits on the GPU with {experts_in_ram(plan)}: attention, the other "
                f"weights and the KV cache of all {layers - 1} layers on {names} ({gb(plan.gpu_bytes)} of "
                f"{gb(free)} free), {gb(plan.cpu_moe_bytes)} of experts in RAM ({gb(plan.ram_bytes)} of "
                f"{gb(plan.ram_available)} available); context {plan.ctx}.{_tps(plan)}")
    if plan.verdict == "partial":
        return (f"{plan.model} fits partly on the GPU: {plan.gpu_layers} of {layers} layers on {names} "
                f"({gb(plan.gpu_bytes)} of {gb(free)} free), the rest on the CPU ({gb(plan.ram_bytes)} "
                f"of {gb(plan.ram_available)} RAM available); context {plan.ctx}.{_tps(plan)}")
    return (f"{plan.model} runs on the CPU: {gb(plan.ram_bytes)} of {gb(plan.ram_available)} RAM "
            f"available; context {plan.ctx}.{_tps(plan)}")


def experts_in_ram(plan: FitPlan) -> str:
    """The plan's experts in RAM in words: "the experts of 18 of 48 layers in RAM" (``--n-cpu-moe 18``)."""
    return f"the experts of {plan.cpu_moe_layers} of {plan.layers_total - 1} layers in RAM"


def _count(n: int) -> str:
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def _primary(short: list[Shortfall]) -> Shortfall:
    return next((s for s in short if s.resource == "RAM"), short[0])


def explain(plan: FitPlan, shape: ModelShape, gpus: list[GpuInfo], target_ctx: int,
            target_short: list[Shortfall], short: list[Shortfall]) -> tuple[str, list[str]]:
    """The plan's message and its notes."""
    notes = []
    asked = plan.requested_ctx
    if asked and shape.ctx_train and asked > shape.ctx_train:
        notes.append(f"The model was trained for {shape.ctx_train} tokens of context: {asked} was lowered to it.")
    if plan.verdict == "too_big":
        s = _primary(short)
        message = (f"{plan.model} does not fit: it needs {gb(s.need)} of {s.resource} at context "
                   f"{plan.ctx}, {gb(s.free)} free: {_ways_out(plan, shape, s)}.")
        return message, notes
    if plan.ctx < target_ctx and target_short:
        s = _primary(target_short)
        notes.append(f"Context {target_ctx} does not fit (it needs {gb(s.need)} of {s.resource}, "
                     f"{gb(s.free)} free): planned with context {plan.ctx}.")
    elif plan.ctx < target_ctx:
        kept, moved = (("more experts", "experts to RAM") if plan.cpu_moe_layers else
                       ("every layer" if plan.verdict == "gpu" else "more layers", "layers to the CPU"))
        notes.append(f"Context {plan.ctx} keeps {kept} on the GPU; a larger context (up to {target_ctx}) "
                     f"would move {moved}.")
    if plan.verdict == "cpu" and gpus:
        notes.append(f"No layer fits in the free memory of {_gpu_names(gpus)}.")
    if shape.moe and shape.experts is not None:
        e = shape.experts
        notes.append(f"A mixture of experts: each token uses {e.used} of {e.count} experts, "
                     f"{_count(shape.active_params)} of {_count(shape.n_params)} weights; the speed counts those.")
    if shape.swa_assumed and shape.sliding_window:
        notes.append(f"Sliding-window layers follow llama.cpp's built-in pattern for {shape.architecture}.")
    if not plan.speed_calibrated and plan.predicted_tokens_per_s is not None:
        notes.append("The speed is an uncalibrated estimate (no decode measured on this machine yet).")
    return _summary(plan, gpus), notes
