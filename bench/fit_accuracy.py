"""Fit planner accuracy: predicted vs measured memory and decode speed, embedded models.

Both embedded models (SmolLM2-135M Q4_1, Gemma 3 270M Q4_K_M) and F16 versions of them
(re-quantized with llama.cpp) are loaded in fresh processes as Hearth loads them.

- Memory: resident-set growth after use, against the planner's host estimate, at an f16
  cache with the context filled (attention buffers at full size) and at a q8_0 cache.
- Speed: decode tokens/s at 448-480 filled cells (the planner predicts at 512 cells, the
  same padded KV size), median of single-token decodes, median over repeats, against
  plan_fit's prediction. The prediction is calibrated first (runtime.hardware.calibrate):
  short decodes of the two Q4 models give the CPU's fixed step cost and bandwidth
  efficiency, so the Q4 rows are calibration points and the F16 rows the independent
  check. ``one_point`` is the prediction calibrated by SmolLM2 alone (no fixed cost).

Targets: memory within 15%, speed within 30%.

    python bench/fit_accuracy.py [--repeats 3] [--skip-f16]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import emit, model_path

from runtime.config import data_dir
from runtime.hardware.calibrate import calibrate_decode
from runtime.hardware.fit import plan_fit
from runtime.hardware.measure import measure_model
from runtime.hardware.memory import Settings, estimate
from runtime.hardware.probe import probe
from runtime.hardware.shape import shape_from_gguf

MIB = 1 << 20
MEMORY_CASES = [(1024, "f16", True), (4096, "q8_0", False)]  # ctx, KV type, fill the context
TARGETS = {"memory": 0.15, "speed": 0.30}


def models(skip_f16: bool) -> dict[str, Path]:
    found = {"smollm2-135m Q4_1": model_path("smollm2-135m"), "gemma-3-270m Q4_K_M": model_path("gemma-3-270m")}
    if not skip_f16:
        from tests.hardware.ggufs import requantize_f16  # the repository root is on sys.path (common)

        out = data_dir() / "bench-f16"
        out.mkdir(exist_ok=True)
        for name, src in list(found.items()):
            dst = out / f"{src.stem}-f16.gguf"
            found[name.split()[0] + " F16"] = dst if dst.exists() else requantize_f16(src, dst)
    return found


def memory_rows(path: Path) -> list[dict]:
    shape = shape_from_gguf(path)

    def one(case: tuple[int, str, bool]) -> dict:
        ctx, kv, fill = case
        # One thread: two loads run side by side on small machines; memory does not depend on it.
        m = measure_model(str(path), ctx, kv, n_seq=4, fill=fill, decode_tokens=4, n_threads=1)
        cpu, _ = estimate(shape, Settings(ctx=ctx, kv_type=kv, n_seq=4))
        return {"ctx": ctx, "kv_type": kv, "filled": m.filled, "predicted_mib": round(cpu.total / MIB, 1),
                "measured_mib": round(m.rss_bytes / MIB, 1), "error": round(cpu.total / m.rss_bytes - 1, 3)}

    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(one, MEMORY_CASES))


def measured_speed(path: Path) -> tuple[float, float]:
    m = measure_model(str(path), 1024, n_seq=1, prefill=448, decode_tokens=32)
    return m.decode_tokens_per_s, m.decode_best_tokens_per_s


def speed_row(path: Path, hw, one_point, runs: list[tuple[float, float]]) -> dict:
    shape = shape_from_gguf(path)
    predicted = plan_fit(shape, hw, ctx=1024, n_seq=1).predicted_tokens_per_s
    single = plan_fit(shape, one_point, ctx=1024, n_seq=1).predicted_tokens_per_s
    median = statistics.median(s for s, _ in runs)
    return {"predicted_tokens_per_s": round(predicted, 1), "measured_tokens_per_s": round(median, 1),
            "error": round(predicted / median - 1, 3), "measured_runs": [round(s, 1) for s, _ in runs],
            "best_tokens_per_s": round(max(b for _, b in runs), 1),
            "one_point": {"predicted_tokens_per_s": round(single, 1), "error": round(single / median - 1, 3)}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-f16", action="store_true")
    args = ap.parse_args()
    hw = probe()
    cal = calibrate_decode(hardware=hw, repeats=args.repeats)
    files = models(args.skip_f16)
    speeds: dict[str, list[tuple[float, float]]] = {name: [] for name in files}
    for _ in range(args.repeats):  # interleaved: drift on a shared machine hits every model
        for name, path in files.items():
            speeds[name].append(measured_speed(path))
    first = cal.points[0]
    one_point = dataclasses.replace(hw, decode_fixed_s=0.0, decode_efficiency=(
        first["bytes_per_token"] * first["tokens_per_s"] / hw.memory_bandwidth))
    rows = [{"model": name, "file_mib": round(path.stat().st_size / MIB, 1), "memory": memory_rows(path),
             "speed": speed_row(path, hw, one_point, speeds[name])} for name, path in files.items()]
    worst_mem = max(abs(r["error"]) for row in rows for r in row["memory"])
    worst_speed = max(abs(row["speed"]["error"]) for row in rows)
    worst_one_point = max(abs(row["speed"]["one_point"]["error"]) for row in rows)
    emit({
        "machine": {"cpu": hw.cpu.model, "physical_cores": hw.cpu.physical_cores,
                    "ram_gib": round(hw.ram.total / (1 << 30), 1),
                    "bandwidth_gb_s": round(hw.memory_bandwidth / 1e9, 1)},
        "calibration": {**cal.to_dict(), "efficiency": round(cal.efficiency, 3),
                        "fixed_ms": round(cal.fixed_s * 1000, 2)},
        "targets": TARGETS, "models": rows,
        "worst_memory_error": worst_mem, "worst_speed_error": worst_speed,
        "worst_speed_error_one_point": worst_one_point,
        "memory_ok": worst_mem <= TARGETS["memory"], "speed_ok": worst_speed <= TARGETS["speed"],
    })


if __name__ == "__main__":
    main()
