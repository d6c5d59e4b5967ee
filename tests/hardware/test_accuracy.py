"""The planner's host-memory estimate against the resident memory of real loads.

Each model is loaded by ``LlamaBackend`` in a fresh process (``measure_model``) and used as
Hearth uses it; the resident-set growth over the process's baseline must be within 15% of
the estimate. With an f16 cache and no flash attention the attention scores grow with the
filled context, so those contexts are small and filled; with a quantized cache flash
attention is on and one batch is enough. One thread per load keeps the two loads that run
side by side from starving each other on two cores; memory does not depend on it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from runtime.hardware.calibrate import calibrate_decode, cpu_bytes_per_token, fit_line
from runtime.hardware.fit import plan_fit
from runtime.hardware.measure import MeasureError, measure_model
from runtime.hardware.memory import Settings, estimate
from runtime.hardware.probe import probe
from runtime.hardware.shape import shape_from_gguf
from tests.hardware.ggufs import requantize_f16

# (model, ctx, kv type, batch, fill the context)
CASES = [
    ("smollm2", 768, "f16", 512, True),
    ("smollm2", 8192, "q8_0", 256, False),
    ("gemma", 1024, "f16", 512, True),
    ("gemma", 4096, "q4_0", 256, False),
    ("smollm2-f16", 512, "f16", 512, True),
]


@pytest.fixture(scope="module")
def models(smollm2_path, gemma_path, tmp_path_factory):
    f16 = requantize_f16(smollm2_path, tmp_path_factory.mktemp("f16") / "smollm2-f16.gguf")
    return {"smollm2": smollm2_path, "gemma": gemma_path, "smollm2-f16": f16}


@pytest.fixture(scope="module")
def measured(models):
    def run(case):
        name, ctx, kv, batch, fill = case
        return case, measure_model(str(models[name]), ctx, kv, n_seq=4, n_batch=batch, fill=fill,
                                   decode_tokens=4, n_threads=1, timeout=240)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(run, CASES))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}-b{c[3]}")
def test_estimate_within_15_percent_of_resident_memory(models, measured, case):
    name, ctx, kv, batch, _ = case
    m = measured[case]
    cpu, _ = estimate(shape_from_gguf(models[name]), Settings(ctx=ctx, kv_type=kv, n_seq=4, n_batch=batch))
    assert m.n_ctx == ctx
    assert abs(cpu.total / m.rss_bytes - 1) <= 0.15, (cpu.to_dict(), m.to_dict())


def test_weights_are_resident_after_load(models, measured):
    # llama.cpp maps the file and reads it in while loading: the weights count from the start
    m = measured[("smollm2-f16", 512, "f16", 512, True)]
    assert m.rss_after_load >= shape_from_gguf(models["smollm2-f16"]).weights_bytes


def test_f16_file_is_larger_by_the_bits(models):
    q, f = shape_from_gguf(models["smollm2"]), shape_from_gguf(models["smollm2-f16"])
    assert f.n_params == q.n_params
    norms = (30 * 2 + 1) * 576  # f32 norm weights keep 4 bytes each
    assert f.weights_bytes == 2 * f.n_params + 2 * norms
    assert abs(f.bits_per_weight - 16) < 0.1 and abs(q.bits_per_weight - 5.74) < 0.01


def test_a_missing_model_fails_the_measure_cleanly(tmp_path):
    with pytest.raises(MeasureError, match="model file not found"):
        measure_model(str(tmp_path / "none.gguf"), 512, timeout=60)


def test_line_fit():
    assert fit_line([(100, 0.016), (300, 0.032)]) == pytest.approx((0.008, 0.00008))
    # a negative fixed cost is noise: the line goes through the origin instead
    fixed, slope = fit_line([(100, 0.005), (300, 0.03)])
    assert fixed == 0 and slope == pytest.approx((100 * 0.005 + 300 * 0.03) / (100**2 + 300**2))
    assert fit_line([(100, 0.01)]) == pytest.approx((0.0, 0.0001))


def test_calibration_is_stored_and_used(data_dir, smollm2_path, gemma_path):
    hw = probe()
    cal = calibrate_decode([smollm2_path, gemma_path], hw, decode_tokens=8, n_threads=1)
    assert [p["model"] for p in cal.points] == [smollm2_path.name, gemma_path.name]
    assert all(p["tokens_per_s"] > 0 for p in cal.points) and cal.fixed_s >= 0
    assert cal.points[0]["bytes_per_token"] == cpu_bytes_per_token(smollm2_path, 64 + 8)
    seconds = [cal.fixed_s + p["bytes_per_token"] / (cal.efficiency * hw.memory_bandwidth) for p in cal.points]
    if cal.fixed_s > 0:  # a line through two points passes through both
        assert seconds == pytest.approx([1 / p["tokens_per_s"] for p in cal.points], rel=1e-6)
    again = probe()
    assert (again.decode_efficiency, again.decode_fixed_s) == (cal.efficiency, cal.fixed_s)
    plan = plan_fit(shape_from_gguf(smollm2_path), again, ctx=512)
    assert plan.speed_calibrated
    by_hand = cal.fixed_s + cpu_bytes_per_token(smollm2_path, 512) / (cal.efficiency * hw.memory_bandwidth)
    assert plan.predicted_tokens_per_s == pytest.approx(1 / by_hand)
    # A new bandwidth measure voids a calibration made against the old one.
    fresh = probe(remeasure=True)
    assert fresh.decode_efficiency is None and fresh.decode_fixed_s == 0
    assert not plan_fit(shape_from_gguf(smollm2_path), fresh, ctx=512).speed_calibrated
