"""Readable terminal text for ``hearth probe`` and ``hearth fit``."""

from __future__ import annotations

import textwrap

from runtime.hardware.advice import experts_in_ram
from runtime.hardware.fit import FitPlan
from runtime.hardware.info import HardwareInfo

_VERDICTS = {
    "gpu": "fits on the GPU",
    "partial": "fits, split between GPU and CPU",
    "cpu": "runs on the CPU",
    "too_big": "does not fit",
}


def size(n: int | float) -> str:
    """Bytes as MB below 1 GiB, else GB (binary units, as operating systems count them)."""
    if n < 1 << 30:
        return f"{n / (1 << 20):.0f} MB"
    return f"{n / (1 << 30):.1f} GB"


def _rows(rows: list[tuple[str, str]]) -> str:
    width = max(len(k) for k, _ in rows)
    out = []
    for key, value in rows:
        lines = value.splitlines() or [""]
        out.append(f"  {key:<{width}}  {lines[0]}")
        out += [f"  {'':<{width}}  {line}" for line in lines[1:]]
    return "\n".join(out)


def _wrap(text: str, indent: str = "  ") -> str:
    return "\n".join(textwrap.fill(p, 88, initial_indent=indent, subsequent_indent=indent + "  ")
                     for p in text.splitlines())


def format_probe_report(info: HardwareInfo) -> str:
    """The probe as a few aligned lines, then the backend advice when a GPU sits idle."""
    cpu = info.cpu
    gpus = "\n".join(
        f"{'RPC worker ' if g.remote else ''}{g.name}: {size(g.memory_total)}, {size(g.memory_free)} free"
        f"{' (unified memory)' if g.unified else ''} - "
        f"{'used by llama.cpp as ' + str(g.device) if g.usable else 'not usable by this build'}"
        for g in info.gpus
    ) or "none"
    bandwidth = (f"; bandwidth {info.memory_bandwidth / 1e9:.1f} GB/s (copy)"
                 if info.memory_bandwidth else "")
    build = info.build
    llama = (f"llama-cpp-python {build.version}, backends: {', '.join(build.backends)}; "
             f"layers run on: {info.backend.active}" if build else "llama.cpp not available")
    decode = (f"calibrated: weights read at {info.decode_efficiency:.2f} of the copy bandwidth, "
              f"{info.decode_fixed_s * 1000:.1f} ms fixed a token"
              if info.decode_efficiency else "not calibrated (speeds are estimates)")
    rows = [
        ("OS", f"{info.os} {info.os_release}"),
        ("CPU", f"{cpu.model} ({cpu.arch}), {cpu.physical_cores} cores, {cpu.logical_cores} threads"),
        ("SIMD", ", ".join(cpu.features) or "unknown"),
        ("RAM", f"{size(info.ram.total)} total, {size(info.ram.available)} available{bandwidth}"),
        ("GPUs", gpus),
        *([("RPC workers", "\n".join(f"{r.endpoint}: {r.state}{f' (protocol {r.version})' if r.version else ''}"
                                      f"{f' - {r.detail}' if r.detail else ''}" for r in info.rpc))]
          if info.rpc else []),
        ("llama.cpp", llama),
        ("Decode", decode),
    ]
    text = "Hardware\n" + _rows(rows)
    if info.backend.message:
        text += "\n\n" + _wrap(info.backend.message)
    return text


def tps(x: float) -> str:
    """Tokens per second as people read them: 58, 7.4, 0.31."""
    return f"{x:.0f}" if x >= 10 else f"{x:.1f}" if x >= 1 else f"{x:.2f}"


def limit_text(plan: FitPlan) -> str:
    """The memory wall in words: "limit 58 tok/s from memory bandwidth (41 with all 32768 tokens
    of context in use)"."""
    text = f"limit {tps(plan.decode_limit_tps or 0)} tok/s from memory bandwidth"
    full = plan.decode_limit_at_ctx_tps
    if full is not None and plan.decode_limit_tps and full < plan.decode_limit_tps * 0.995:
        text += f" ({tps(full)} with all {plan.ctx} tokens of context in use)"
    return text


def format_fit_report(plan: FitPlan) -> str:
    """The plan: verdict, placement, memory by part and device, speed, message and notes."""
    # llama.cpp counts the output layer as one more layer, offloaded first
    layers = (f"{plan.gpu_layers} of {plan.layers_total} on the GPU (n_gpu_layers={plan.gpu_layers})"
              if plan.gpu_layers else f"all {plan.layers_total - 1} layers and the output on the CPU")
    if plan.cpu_moe_layers:
        layers += f";\n{experts_in_ram(plan)} ({size(plan.cpu_moe_bytes)}; --n-cpu-moe {plan.cpu_moe_layers})"
    parts = (f"weights {size(plan.weights_bytes)}, KV {size(plan.kv_bytes)} ({plan.kv_type}), "
             f"compute {size(plan.compute_bytes)}, other {size(plan.overhead_bytes)}")
    if plan.state_bytes:
        parts = parts.replace(f"({plan.kv_type})", f"({plan.kv_type}; recurrent state "
                              f"{size(plan.state_bytes)} for {plan.n_seq} sequences, at any context)", 1)
    if plan.repacked_bytes:
        parts = parts.replace("weights " + size(plan.weights_bytes),
                              f"weights {size(plan.weights_bytes)} + {size(plan.repacked_bytes)} repacked for this CPU", 1)
    if plan.projector_bytes:
        parts += f", projector {size(plan.projector_bytes)}"
    if plan.draft_bytes:
        parts += f", draft {size(plan.draft_bytes)}"
    devices = "\n".join(
        f"{d.name}: {size(d.total)} ({len(d.layers)} layers{', output' if d.output else ''}"
        f"{f', experts of {len(d.experts)} layers' if d.experts else ''})"
        for d in plan.devices
    )
    speed = "-" if plan.predicted_tokens_per_s is None else (
        f"about {plan.predicted_tokens_per_s:.1f} tokens/s"
        f"{'' if plan.speed_calibrated else ' (uncalibrated estimate)'}")
    if plan.decode_limit_tps is not None:
        speed += f";\n{limit_text(plan)}"
    rows = [
        ("Model", plan.model),
        ("Verdict", f"{plan.verdict}: {_VERDICTS[plan.verdict]}"),
        ("Context", f"{plan.ctx} tokens ({plan.n_seq} sequences, batch {plan.n_batch})"),
        ("Layers", layers),
        ("Memory", f"{size(plan.total_bytes)} = {parts}"),
        ("Devices", devices),
        *([("Split", f"{plan.split_mode} (tensor_split={','.join(f'{x:g}' for x in plan.tensor_split)}, "
                     f"main_gpu={plan.main_gpu})")] if plan.tensor_split else []),
        ("Speed", speed),
    ]
    text = "Fit\n" + _rows(rows) + "\n\n" + _wrap(plan.message)
    if plan.notes:
        text += "\n" + "\n".join(_wrap("- " + n) for n in plan.notes)
    return text
