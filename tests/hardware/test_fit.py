"""plan_fit on real headers and on catalog numbers, with recorded GPU machines.

Expected values are worked out here from the documented rules: a device fits when
int(estimate * 1.1) + reserve <= free (512 MiB reserve on a GPU and in RAM), llama.cpp's
n_gpu_layers = k puts the output layer and the last k - 1 layers on the GPU, an f16 KV cell
of a layer takes n_head_kv * (head_dim_k + head_dim_v) * 2 bytes.
"""

from __future__ import annotations

import pytest

from runtime.hardware.fit import plan_fit
from runtime.hardware.memory import UnknownKVType
from runtime.hardware.report import format_fit_report
from runtime.hardware.catalog_shape import shape_from_numbers
from runtime.hardware.shape import shape_from_gguf
from tests.hardware import recorded as rec
from tests.hardware.test_shape import MISTRAL_7B_Q4_K_M

MIB, GIB = 1 << 20, 1 << 30
RESERVE = 512 * MIB
CPU_ONLY_32G = rec.machine([], 32 * GIB, 28 * GIB)
LLAMA_8B_Q8_0 = dict(
    name="Llama 3.1 8B Q8_0", architecture="llama", file_bytes=8_540_770_880, n_layer=32, n_head=32,
    n_head_kv=8, head_dim=128, n_embd=4096, n_vocab=128256, ctx_train=131072, n_ff=14336,
)


def test_plan_dict_has_the_documented_keys(smollm2_path):
    plan = plan_fit(shape_from_gguf(smollm2_path), CPU_ONLY_32G)
    d = plan.to_dict()
    for key in ("verdict", "gpu_layers", "ctx", "total_bytes", "weights_bytes", "kv_bytes",
                "predicted_tokens_per_s", "message", "devices", "notes"):
        assert key in d
    assert d["verdict"] == "cpu" and d["gpu_layers"] == 0
    assert d["total_bytes"] == sum(dev["total_bytes"] for dev in d["devices"])


def test_smollm2_on_the_cpu_uses_the_trained_context(smollm2_path):
    plan = plan_fit(shape_from_gguf(smollm2_path), CPU_ONLY_32G)
    assert (plan.verdict, plan.ctx, plan.gpu_layers) == ("cpu", 8192, 0)
    assert plan.weights_bytes == 30 * 2216448 + 576 * 49152 // 32 * 34 + 576 * 4
    assert plan.kv_bytes == 30 * 3 * (64 + 64) * 2 * 8192
    assert plan.ram_bytes == plan.total_bytes and plan.gpu_bytes == 0
    assert "runs on the CPU" in plan.message


def test_context_never_exceeds_the_request_nor_the_training(smollm2_path):
    shape = shape_from_gguf(smollm2_path)
    plan = plan_fit(shape, CPU_ONLY_32G, ctx=3000)
    assert plan.ctx == 3000
    assert plan.kv_bytes == 30 * 3 * 128 * 2 * 3072  # llama.cpp pads the cells to 256
    plan = plan_fit(shape, CPU_ONLY_32G, ctx=100_000)
    assert plan.ctx == 8192
    assert any("trained for 8192" in n for n in plan.notes)


@pytest.mark.parametrize("kv_type, per_element", [("f16", 2), ("q8_0", 34 / 32), ("q4_0", 18 / 32)])
def test_kv_types(smollm2_path, kv_type, per_element):
    plan = plan_fit(shape_from_gguf(smollm2_path), CPU_ONLY_32G, ctx=4096, kv_type=kv_type)
    assert plan.kv_bytes == int(30 * 3 * 128 * per_element * 4096)


def test_bad_arguments(smollm2_path):
    shape = shape_from_gguf(smollm2_path)
    with pytest.raises(UnknownKVType, match="use one of f16, q8_0, q4_0"):
        plan_fit(shape, CPU_ONLY_32G, kv_type="q5_1")
    with pytest.raises(ValueError, match="positive"):
        plan_fit(shape, CPU_ONLY_32G, ctx=0)


def test_context_shrinks_until_it_fits_in_ram(gemma_path):
    small = rec.machine([], 4 * GIB, int(1.2 * GIB))
    plan = plan_fit(shape_from_gguf(gemma_path), small, ctx=32768, kv_type="f16", swa_full=True)
    # every layer keeps the whole context (swa_full): 32768: 590 MB of KV + 330 MB of attention scores; 16384 still over 1.2 GB with margins
    assert (plan.verdict, plan.ctx) == ("cpu", 8192)
    assert plan.kv_bytes == 18 * 1 * 512 * 2 * 8192
    assert int(plan.ram_bytes * 1.1) + RESERVE <= small.ram.available
    assert any("Context 32768 does not fit" in n and "of RAM" in n for n in plan.notes)


def test_too_big_gives_numbers_and_the_way_out():
    laptop = rec.machine([], 8 * GIB, 6 * GIB)
    plan = plan_fit(shape_from_numbers(**LLAMA_8B_Q8_0), laptop, ctx=8192)
    assert plan.verdict == "too_big" and not plan.fits and plan.predicted_tokens_per_s is None
    # 8.5 bits a weight: Q6_K and Q5_K_M still need more than 6 GB, Q4_K_M fits
    assert "needs" in plan.message and "of RAM" in plan.message and "6.0 GB free" in plan.message
    assert "choose Q4_K_M" in plan.message
    assert plan.to_dict()["fits"] is False


def _mistral_gpu_bytes(k: int, ctx: int) -> int:
    """GPU bytes of the Mistral shape with n_gpu_layers = k, by hand."""
    per_param = 4_368_439_584 / 7_241_465_856
    layer = int((2 * 4096 * 32 * 128 + 2 * 4096 * 8 * 128 + 3 * 4096 * 14336) * per_param)
    output = int(32000 * 4096 * per_param)
    kv_per_layer = 8 * (128 + 128) * 2 * ctx
    compute = max(512 * ctx * 2 + 512 * (3 * 4096 + 14336) * 4,  # flash attention: f16 mask
                  512 * 32000 * 4 + 512 * 3 * 4096 * 4)  # logits of a full batch
    return output + (k - 1) * (layer + kv_per_layer) + compute


def _expected_layers(free: int, ctx: int) -> int:
    return max(k for k in range(0, 34) if k == 0 or int(_mistral_gpu_bytes(k, ctx) * 1.1) + RESERVE <= free)


@pytest.mark.parametrize("gpu, verdict, ctx", [
    (rec.H100, "gpu", 32768),
    (rec.RTX_4090, "gpu", 32768),
    (rec.RTX_3060, "gpu", 32768),
    (rec.RTX_4060, "gpu", 16384),  # 8 GB: whole at 16384, not at 32768
    (rec.GTX_1650, "partial", 8192),  # 4 GB
    (rec.MX250, "partial", 8192),  # 2 GB
])
def test_7b_layer_split_by_vram(gpu, verdict, ctx):
    hw = rec.machine([gpu], 32 * GIB, 28 * GIB)
    plan = plan_fit(shape_from_numbers(**MISTRAL_7B_Q4_K_M), hw, kv_type="f16")
    assert (plan.verdict, plan.ctx) == (verdict, ctx)
    expected = 33 if verdict == "gpu" else _expected_layers(gpu.memory_free, ctx)
    assert plan.gpu_layers == expected
    assert plan.gpu_bytes == _mistral_gpu_bytes(expected, ctx)
    assert int(plan.gpu_bytes * 1.1) + RESERVE <= gpu.memory_free
    if verdict == "partial":
        assert int(_mistral_gpu_bytes(expected + 1, ctx) * 1.1) + RESERVE > gpu.memory_free
        assert f"{expected} of 33 layers on NVIDIA GeForce" in plan.message


def test_split_counts_for_4gb_and_2gb():
    # the same rule as above, as plain numbers: 19 and 8 of 33 layers
    for gpu, layers in ((rec.GTX_1650, 19), (rec.MX250, 8)):
        plan = plan_fit(shape_from_numbers(**MISTRAL_7B_Q4_K_M), rec.machine([gpu], 32 * GIB, 28 * GIB))
        assert plan.gpu_layers == layers


def test_apple_unified_memory_counts_gpu_bytes_against_ram():
    m2 = rec.machine([rec.M2_METAL], 16 * GIB, 9 * GIB, os_name="Darwin", arch="arm64", cpu_model="Apple M2")
    plan = plan_fit(shape_from_numbers(**MISTRAL_7B_Q4_K_M), m2, kv_type="f16")
    # Metal's 10.7 GB would take context 32768; the 9 GB of free RAM it shares do not.
    assert (plan.verdict, plan.ctx, plan.gpu_layers) == ("gpu", 16384, 33)
    # Host side: token embeddings, the inputs of a batch, the vocabulary and logits, 22 MiB
    # of runtime, 256 MiB for the GPU backend's host side, 32 MiB for the worker process.
    embeddings = int(32000 * 4096 * 4_368_439_584 / 7_241_465_856)
    host = embeddings + 512 * 4096 * 4 * 2 + 22 * MIB + 120 * 32000 + 32000 * 4 * 4 + 256 * MIB + 32 * MIB
    assert plan.ram_bytes == host
    assert int((plan.gpu_bytes + plan.ram_bytes) * 1.1) + RESERVE <= m2.ram.available
    assert any("Context 32768 does not fit" in n and "RAM" in n for n in plan.notes)


def test_draft_model_is_counted(gemma_path, smollm2_path):
    main, draft = shape_from_gguf(gemma_path), shape_from_gguf(smollm2_path)
    alone = plan_fit(main, CPU_ONLY_32G, ctx=4096)
    both = plan_fit(main, CPU_ONLY_32G, ctx=4096, draft=draft)
    assert both.total_bytes - alone.total_bytes == both.draft_bytes
    assert both.draft_bytes >= 96576768 + 30 * 3 * 128 * 2 * 4096  # weights + KV by hand
    assert (both.weights_bytes, both.kv_bytes) == (alone.weights_bytes, alone.kv_bytes)
    on_gpu = plan_fit(main, rec.machine([rec.RTX_4090], 32 * GIB, 28 * GIB), ctx=4096, draft=draft)
    assert on_gpu.verdict == "gpu" and on_gpu.gpu_bytes > 96576768 + 30 * 3 * 128 * 2 * 4096


def test_speed_prediction_uses_bandwidth_and_bytes(smollm2_path):
    shape = shape_from_gguf(smollm2_path)
    hw = rec.machine([], 32 * GIB, 28 * GIB, bandwidth=40e9)
    hw.decode_efficiency, hw.decode_fixed_s = 0.5, 0.002
    plan = plan_fit(shape, hw, ctx=2048)
    per_token = sum(shape.layer_bytes) + shape.output_matrix_bytes + 30 * 3 * 128 * 2 * 512
    grouped = 30 * 3 * 128 * 2 * 512 * 2  # on the CPU, 9 query heads on 3 KV heads: each KV row twice more
    assert plan.predicted_tokens_per_s == pytest.approx(1 / (0.002 + (per_token + grouped) / (40e9 * 0.5)))
    assert plan.speed_calibrated
    # all layers on the GPU: its bandwidth, no CPU step cost
    fast = rec.machine([rec.RTX_4090], 32 * GIB, 28 * GIB, bandwidth=40e9)
    fast.decode_efficiency, fast.decode_fixed_s = 0.5, 0.002
    gpu_plan = plan_fit(shape, fast, ctx=2048)
    assert gpu_plan.predicted_tokens_per_s == pytest.approx(1008e9 * 0.6 / per_token)
    assert not gpu_plan.speed_calibrated


def test_report_text(smollm2_path):
    plan = plan_fit(shape_from_numbers(**MISTRAL_7B_Q4_K_M), rec.machine([rec.GTX_1650], 32 * GIB, 28 * GIB))
    text = format_fit_report(plan)
    assert "partial" in text and "19 of 33 on the GPU" in text and "CUDA0" in text
    assert "tokens/s" in text


def test_dicts_are_json_for_the_api(smollm2_path):
    import json

    hw = rec.machine([rec.RTX_4090], 32 * GIB, 28 * GIB)
    plan = plan_fit(shape_from_gguf(smollm2_path), hw, draft=shape_from_gguf(smollm2_path))
    assert json.loads(json.dumps(plan.to_dict()))["devices"][1]["device"] == "CUDA0"
    assert json.loads(json.dumps(hw.to_dict()))["gpus"][0]["name"] == "NVIDIA GeForce RTX 4090"


def test_default_context_is_agent_sized_and_quantizes_the_kv_only_when_that_fits_more():
    """No context asked for: the trained context up to 32768 (a coding agent's prompt fits), at
    f16 where that holds it, else at q8_0 where that holds more of it; asked for a type, kept."""
    big = rec.machine([], 64 * GIB, 60 * GIB)
    long_trained = shape_from_numbers(**{**MISTRAL_7B_Q4_K_M, "ctx_train": 131072})
    plan = plan_fit(long_trained, big)
    assert (plan.ctx, plan.kv_type, plan.requested_ctx) == (32768, "f16", None)
    assert plan_fit(long_trained, big, ctx=65536).ctx == 65536  # asked for: not capped
    # 8 GB: whole on the GPU at 16384 with f16; q8_0 halves the cells' bytes and holds 32768
    hw = rec.machine([rec.RTX_4060], 32 * GIB, 28 * GIB)
    f16 = plan_fit(shape_from_numbers(**MISTRAL_7B_Q4_K_M), hw, kv_type="f16")
    auto = plan_fit(shape_from_numbers(**MISTRAL_7B_Q4_K_M), hw)
    assert (f16.ctx, f16.kv_type) == (16384, "f16")
    assert (auto.verdict, auto.ctx, auto.kv_type, auto.gpu_layers) == ("gpu", 32768, "q8_0", 33)
    assert auto.kv_bytes * 2 == pytest.approx(f16.kv_bytes * 2 * 32768 / 16384 * 34 / 64, rel=0.01)
    assert any("q8_0" in n and "16384" in n for n in auto.notes)
    # a partial offload is capped at 8192 either way: q8_0 gains nothing there and is not taken
    partial = plan_fit(shape_from_numbers(**MISTRAL_7B_Q4_K_M), rec.machine([rec.GTX_1650], 32 * GIB, 28 * GIB))
    assert (partial.verdict, partial.ctx, partial.kv_type) == ("partial", 8192, "f16")
