"""Calibrate the decode-speed prediction with measured decodes on this machine.

The planner predicts the time of one CPU decode step as ``fixed + bytes / (bandwidth *
efficiency)``: a fixed cost per step (graph, thread barriers, logits and sampling) plus the
weights and KV cache read at a fraction of the copy bandwidth. Each measured model is one
point (bytes read per token, seconds per token):

- one point (SmolLM2): ``fixed`` is taken as 0 and the efficiency absorbs everything;
- two points (SmolLM2 and Gemma 3, both embedded; the default): a line through them gives
  both. On this project's 2-core build machine the one-point fit predicted F16 models 37-49%
  too slow, because a 100 MB model spends half its step on fixed costs; the two-point fit
  brought that within 25% (bench/fit_accuracy.py).

The result is stored next to the bandwidth in the data directory's ``hardware.json``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runtime.hardware import bandwidth as bw
from runtime.hardware.info import HardwareInfo
from runtime.hardware.measure import measure_model
from runtime.hardware.memory import Settings, bytes_per_token, estimate, pad_ctx
from runtime.hardware.probe import probe
from runtime.hardware.shape import shape_from_gguf
from runtime.hardware.speed import grouped_attention_bytes

CALIBRATION_MODELS = ("smollm2-135m", "gemma-3-270m")
PREFILL = 64  #: a short prompt: prefill is compute-bound and says nothing of decode


@dataclass(slots=True)
class DecodeCalibration:
    efficiency: float  #: fraction of the copy bandwidth decoding reads weights at
    fixed_s: float  #: fixed seconds per decode step
    bandwidth: float
    threads: int
    measured_at: str
    points: list[dict] = field(default_factory=list)  #: model, bytes_per_token, tokens_per_s

    def to_dict(self) -> dict:
        return asdict(self)


def default_model_paths() -> list[Path]:
    """The embedded models' files (placed in the data directory on first use)."""
    from runtime.config import data_dir
    from runtime.store.catalog import load_catalog
    from runtime.store.embedded import ensure_embedded

    catalog = load_catalog()
    return [ensure_embedded(catalog[name], data_dir()) for name in CALIBRATION_MODELS]


def cpu_bytes_per_token(path: str | Path, filled: int, n_ctx: int = 512) -> int:
    """Bytes one decode step of a CPU-only model goes through with ``filled`` cells in use: what
    it reads, and its KV rows once more for each further query head of a group (as the
    prediction counts them, ``runtime.hardware.speed``)."""
    shape = shape_from_gguf(path)
    s = Settings(ctx=n_ctx, n_seq=1)
    cpu, gpus = estimate(shape, s)
    grouped = grouped_attention_bytes(shape, s, cpu.layers, pad_ctx(filled))
    return int(bytes_per_token(shape, s, cpu, gpus, filled)[0] + grouped)


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """``(fixed, seconds_per_byte)`` of ``seconds = fixed + bytes * seconds_per_byte``.

    Least squares over (bytes, seconds); one point, or a fit with a negative fixed cost
    (noise), falls back to a line through the origin.
    """
    n = len(points)
    if n >= 2:
        mb = sum(b for b, _ in points) / n
        mt = sum(t for _, t in points) / n
        var = sum((b - mb) ** 2 for b, _ in points)
        if var > 0:
            slope = sum((b - mb) * (t - mt) for b, t in points) / var
            fixed = mt - slope * mb
            if fixed >= 0 and slope > 0:
                return fixed, slope
    return 0.0, sum(t * b for b, t in points) / sum(b * b for b, _ in points)


def calibrate_decode(model_paths: list[str | Path] | None = None, hardware: HardwareInfo | None = None,
                     decode_tokens: int = 32, n_threads: int = 0, repeats: int = 1) -> DecodeCalibration:
    """Measure decode speed here (a few seconds a model) and store the fit for the planner.

    ``n_threads`` 0 decodes as Hearth does (one thread per physical core); with ``repeats``
    the models are measured in turn that many times and the median speed of each is used.
    """
    hardware = hardware or probe()
    if not hardware.memory_bandwidth:
        raise RuntimeError("the RAM bandwidth is not measured yet: run probe() first")
    paths = [Path(p) for p in model_paths] if model_paths else default_model_paths()
    speeds: dict[Path, list[float]] = {path: [] for path in paths}
    for _ in range(max(repeats, 1)):  # in turn, so that drift on a busy machine hits each model
        for path in paths:
            m = measure_model(str(path), n_ctx=512, n_seq=1, prefill=PREFILL,
                              decode_tokens=decode_tokens, n_threads=n_threads)
            speeds[path].append(m.decode_tokens_per_s)
    points: list[dict[str, Any]] = [
        {"model": path.name, "bytes_per_token": cpu_bytes_per_token(path, PREFILL + decode_tokens),
         "tokens_per_s": statistics.median(runs)} for path, runs in speeds.items()]
    fixed, per_byte = fit_line([(p["bytes_per_token"], 1 / p["tokens_per_s"]) for p in points])
    cal = DecodeCalibration(
        efficiency=1 / (per_byte * hardware.memory_bandwidth), fixed_s=fixed,
        bandwidth=hardware.memory_bandwidth, threads=m.n_threads,
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"), points=points,
    )
    bw.update_cache(hardware.fingerprint, decode=cal.to_dict())
    hardware.decode_efficiency, hardware.decode_fixed_s = cal.efficiency, cal.fixed_s
    return cal
