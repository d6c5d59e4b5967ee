"""The memory wall: the most tokens per second a machine's memory bandwidth allows one stream,
bytes read per token (the weights a token reads, of a MoE model only the experts it uses, and
the KV cache in use) over each device's bandwidth; in the fit plan and its report."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runtime.hardware.catalog_shape import shape_from_numbers
from runtime.hardware.fit import plan_fit
from runtime.hardware.report import format_fit_report, tps
from tests.hardware import recorded as rec

GIB = 1 << 30
MISTRAL_7B_Q4_K_M = dict(
    name="Mistral 7B Instruct Q4_K_M", architecture="llama", file_bytes=4_368_439_584, n_layer=32,
    n_head=32, n_head_kv=8, head_dim=128, n_embd=4096, n_vocab=32000, ctx_train=32768, n_ff=14336,
)
QWEN3_30B_A3B = dict(
    name="Qwen3 30B A3B Q4_K_M", architecture="qwen3moe", file_bytes=18_600_000_000, n_layer=48, n_head=32,
    n_head_kv=4, head_dim=128, n_embd=2048, n_vocab=151936, ctx_train=40960,
    n_expert=128, n_expert_used=8, n_ff_expert=768,
)
CPU_ONLY = rec.machine([], 64 * GIB, 60 * GIB, bandwidth=40e9)


def kv_bytes_per_cell(layers: int, kv_heads: int, head_dim: int) -> int:
    return layers * kv_heads * 2 * head_dim * 2  # K and V, f16


def test_a_dense_model_on_the_cpu_reads_every_weight_and_its_kv_per_token():
    shape = shape_from_numbers(**MISTRAL_7B_Q4_K_M)
    plan = plan_fit(shape, CPU_ONLY, ctx=4096, kv_type="f16")
    assert plan.verdict == "cpu"
    weights = sum(shape.layer_bytes) + shape.output_bytes  # the embeddings: one row a token
    kv = kv_bytes_per_cell(32, 8, 128)
    assert plan.decode_limit_tps == pytest.approx(40e9 / (weights + 512 * kv))
    assert plan.decode_limit_at_ctx_tps == pytest.approx(40e9 / (weights + 4096 * kv))
    assert 9 < plan.decode_limit_tps < 10  # 4.1 GB of weights a token at 40 GB/s
    # the prediction spends a share of the same wall: it is always below it
    assert plan.predicted_tokens_per_s < plan.decode_limit_tps


def test_a_moe_model_reads_only_the_experts_a_token_uses():
    shape = shape_from_numbers(**QWEN3_30B_A3B)
    plan = plan_fit(shape, CPU_ONLY, ctx=4096, kv_type="f16")
    assert shape.experts is not None
    unread = shape.experts.total_bytes * (1 - 8 / 128)
    weights = sum(shape.layer_bytes) - unread + shape.output_bytes
    kv = kv_bytes_per_cell(48, 4, 128)
    assert plan.decode_limit_tps == pytest.approx(40e9 / (weights + 512 * kv), rel=1e-6)
    dense = plan_fit(shape_from_numbers(**{k: v for k, v in QWEN3_30B_A3B.items() if "expert" not in k},
                                        n_params=shape.n_params), CPU_ONLY, ctx=4096, kv_type="f16")
    assert plan.decode_limit_tps > 7 * dense.decode_limit_tps  # 3.3B of 30.5B weights a token


def test_on_a_gpu_the_limit_is_the_gpus_bandwidth():
    shape = shape_from_numbers(**MISTRAL_7B_Q4_K_M)
    hw = rec.machine([rec.RTX_4090], 64 * GIB, 60 * GIB, bandwidth=40e9)
    plan = plan_fit(shape, hw, ctx=4096, kv_type="f16")
    assert plan.verdict == "gpu"
    weights = sum(shape.layer_bytes) + shape.output_bytes
    gpu = hw.usable_gpus[0]
    assert plan.decode_limit_tps == pytest.approx(gpu.bandwidth / (weights + 512 * kv_bytes_per_cell(32, 8, 128)))
    assert plan.decode_limit_tps > 200  # about 1 TB/s over 4.1 GB


def test_without_a_measured_bandwidth_there_is_no_limit_to_state():
    plan = plan_fit(shape_from_numbers(**MISTRAL_7B_Q4_K_M), replace(CPU_ONLY, memory_bandwidth=None), ctx=4096)
    assert plan.decode_limit_tps is None and plan.to_dict()["decode_limit_tps"] is None
    assert "from memory bandwidth" not in format_fit_report(plan)


def test_the_fit_report_and_its_json_say_the_limit():
    plan = plan_fit(shape_from_numbers(**QWEN3_30B_A3B), CPU_ONLY, ctx=32768, kv_type="f16")
    text = format_fit_report(plan)
    limit, full = plan.decode_limit_tps, plan.decode_limit_at_ctx_tps
    assert limit is not None and full is not None and full < limit
    assert f"limit {tps(limit)} tok/s from memory bandwidth ({tps(full)} with all 32768 tokens of context in use)" in text
    assert (tps(58.4), tps(7.93), tps(0.314)) == ("58", "7.9", "0.31")
    d = plan.to_dict()
    assert d["decode_limit_tps"] == round(limit, 1) and d["decode_limit_at_ctx_tps"] == round(full, 1)
    assert "limit" not in format_fit_report(plan_fit(shape_from_numbers(**QWEN3_30B_A3B),
                                                     rec.machine([], 8 * GIB, 6 * GIB), ctx=32768))  # too big


def test_the_cpus_attention_reads_each_kv_head_once_per_query_head():
    """The prediction (not the wall) counts a filled cell once per query head on the CPU: with
    32 query heads on 4 KV heads, 8 times its bytes (measured on a generated Qwen3-MoE shape:
    decode fell from 26 to 17 tokens/s between 64 and 1,500 cells, as that count says)."""
    from runtime.hardware.memory import Settings, estimate
    from runtime.hardware.speed import grouped_attention_bytes, predict_decode

    shape = shape_from_numbers(**QWEN3_30B_A3B)
    s = Settings(ctx=4096, n_seq=1)
    cpu, gpus = estimate(shape, s)
    per_cell = kv_bytes_per_cell(48, 4, 128)
    assert grouped_attention_bytes(shape, s, cpu.layers, 512) == pytest.approx(512 * per_cell * 7)
    mha = shape_from_numbers(**{**QWEN3_30B_A3B, "n_head_kv": 32})
    assert grouped_attention_bytes(mha, s, cpu.layers, 512) == 0
    tps, _ = predict_decode(shape, CPU_ONLY, s, cpu, gpus, [])
    plan = plan_fit(shape, CPU_ONLY, ctx=4096, kv_type="f16")
    assert plan.predicted_tokens_per_s == pytest.approx(tps, rel=0.01)
    # a sizeable part of the step at 512 cells: 7 x 50 MB more beside 2 GB of weights read
    without = 1 / (1 / tps - 512 * per_cell * 7 / (40e9 * 0.35))
    assert without > 1.1 * tps
