"""Calibrate the decode-speed prediction with one measured point on this machine.

The planner predicts tokens/s as RAM bandwidth / bytes read per token. Real decoding reaches
only a fraction of the copy bandwidth (thread start-up per token, dequantization work, the
cache); that fraction is measured here once, by decoding with a small model in a fresh
process, and stored next to the bandwidth in the data directory's ``hardware.json``.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from runtime.hardware import bandwidth as bw
from runtime.hardware.measure import measure_model
from runtime.hardware.memory import Settings, bytes_per_token, estimate
from runtime.hardware.info import HardwareInfo
from runtime.hardware.probe import probe
from runtime.hardware.shape import shape_from_gguf

CALIBRATION_MODEL = "smollm2-135m"


@dataclass(slots=True)
class DecodeCalibration:
    efficiency: float  #: measured tokens/s over bandwidth / bytes per token
    model: str
    tokens_per_s: float
    bytes_per_token: int
    bandwidth: float
    threads: int
    measured_at: str

    def to_dict(self) -> dict:
        return asdict(self)


def default_model_path() -> Path:
    """The embedded SmolLM2 file (placed in the data directory on first use)."""
    from runtime.config import data_dir
    from runtime.store.catalog import load_catalog
    from runtime.store.embedded import ensure_embedded

    return ensure_embedded(load_catalog()[CALIBRATION_MODEL], data_dir())


def raw_tokens_per_s(path: str | Path, bandwidth: float, filled: int, n_ctx: int = 512) -> tuple[float, int]:
    """Bandwidth-bound tokens/s of a CPU-only model, and the bytes it reads per token."""
    shape = shape_from_gguf(path)
    s = Settings(ctx=n_ctx, n_seq=1)
    cpu, gpus = estimate(shape, s)
    per_token, _ = bytes_per_token(shape, s, cpu, gpus, filled)
    return bandwidth / per_token, per_token


def calibrate_decode(model_path: str | Path | None = None, hardware: HardwareInfo | None = None,
                     decode_tokens: int = 32, n_threads: int = 0) -> DecodeCalibration:
    """Measure decode speed here (a few seconds) and store the efficiency for the planner.

    ``n_threads`` 0 decodes as Hearth does (one thread per physical core).
    """
    hardware = hardware or probe()
    if not hardware.memory_bandwidth:
        raise RuntimeError("the RAM bandwidth is not measured yet: run probe() first")
    path = Path(model_path) if model_path else default_model_path()
    # A short prompt: prefill is compute-bound and says nothing about decode bandwidth.
    m = measure_model(str(path), n_ctx=512, n_seq=1, prefill=64, decode_tokens=decode_tokens,
                      n_threads=n_threads)
    raw, per_token = raw_tokens_per_s(path, hardware.memory_bandwidth, m.filled)
    cal = DecodeCalibration(
        efficiency=m.decode_tokens_per_s / raw, model=path.name, tokens_per_s=m.decode_tokens_per_s,
        bytes_per_token=per_token, bandwidth=hardware.memory_bandwidth, threads=m.n_threads,
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
    )
    bw.update_cache(hardware.fingerprint, decode=cal.to_dict())
    hardware.decode_efficiency = cal.efficiency
    return cal
