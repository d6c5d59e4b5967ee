"""Mixture-of-experts models in the fit planner: the expert shape read from a GGUF header,
memory that counts every expert, decode speed from the experts a token uses, and the routed
experts of the first layers moved to RAM (llama.cpp's ``--n-cpu-moe``) before whole layers
leave a GPU that is too small.

Qwen3-30B-A3B's numbers are its published config (48 layers, 128 experts of which 8 are used,
hidden 2048, expert FFN 768, 32 heads, 4 KV heads, head dim 128, vocabulary 151,936) with
the Q4_K_M file's size (about 18.6 GB).
"""

from __future__ import annotations

import pytest

from runtime.hardware.fit import GPU_RESERVE_BYTES, plan_fit
from runtime.hardware.memory import Settings, bytes_per_token, estimate, kv_bytes, pad_ctx
from runtime.hardware.report import format_fit_report
from runtime.hardware.catalog_shape import shape_from_catalog, shape_from_numbers
from runtime.hardware.shape import ModelShapeError, shape_from_gguf, shape_from_header
from runtime.store.catalog import CatalogEntry
from runtime.store.gguf_file import read_header
from tests.hardware import recorded as rec
from tests.moe_models import TinyMoe, write_tiny_gpt_oss, write_tiny_qwen3moe

GIB = 1 << 30
QWEN3_30B_A3B = dict(
    name="Qwen3 30B A3B Q4_K_M", architecture="qwen3moe", file_bytes=18_600_000_000, n_layer=48, n_head=32,
    n_head_kv=4, head_dim=128, n_embd=2048, n_vocab=151936, ctx_train=40960,
    n_expert=128, n_expert_used=8, n_ff_expert=768,
)
DENSE_NUMBERS = {k: v for k, v in QWEN3_30B_A3B.items() if not k.startswith(("n_expert", "n_ff_expert"))}


@pytest.fixture(scope="module")
def qwen3moe(tmp_path_factory):
    return write_tiny_qwen3moe(tmp_path_factory.mktemp("moe") / "tiny-qwen3moe.gguf")


def test_the_header_reader_finds_the_expert_shape(qwen3moe, tmp_path):
    m = TinyMoe()
    shape = shape_from_gguf(qwen3moe)
    e = shape.experts
    assert shape.moe and e is not None
    assert (e.count, e.used, e.shared, e.ff) == (8, 2, 0, 64)
    assert e.layer_bytes == (m.expert_bytes,) * m.n_layer
    assert e.params == m.n_layer * m.expert_bytes // 4  # F32
    assert shape.active_params == shape.n_params - e.params * 6 // 8
    assert shape.read_bytes(0) == shape.layer_bytes[0] - m.expert_bytes * 6 / 8
    d = shape.to_dict()
    assert (d["experts"], d["experts_used"], d["expert_bytes"]) == (8, 2, m.n_layer * m.expert_bytes)
    oss = shape_from_gguf(write_tiny_gpt_oss(tmp_path / "tiny-gpt-oss.gguf"))
    assert oss.experts is not None and (oss.experts.count, oss.experts.used) == (8, 2)
    # the expert biases (gpt-oss) are routed experts too: llama.cpp's --n-cpu-moe pattern takes them
    biases = m.n_expert * (2 * m.n_ff_exp + m.n_embd) * 4  # gate and up: n_ff_exp each; down: n_embd
    assert oss.experts.layer_bytes[0] == m.expert_bytes + biases
    assert oss.sliding_window == 128 and oss.swa_layers == (True, False, True, False)


def test_a_dense_model_has_no_experts(tmp_path):
    from tests.hardware.ggufs import write_model

    shape = shape_from_gguf(write_model(tmp_path / "dense.gguf"))
    assert shape.experts is None and not shape.moe and shape.active_params == shape.n_params
    assert "experts" not in shape.to_dict()


def test_a_header_with_experts_but_none_used_is_refused(tmp_path):
    from tests.hardware.ggufs import write_model

    header = read_header(write_model(tmp_path / "m.gguf"))
    header.metadata["llama.expert_count"] = 8
    header.metadata["llama.expert_used_count"] = 0
    with pytest.raises(ModelShapeError, match="8 experts of which 0 are used"):
        shape_from_header(header)


def test_the_planned_memory_of_a_tiny_moe_is_its_file_and_kv_cache(qwen3moe):
    """Every expert is in memory: weights + KV within 10% of the file's size + the KV cache."""
    m = TinyMoe()
    shape = shape_from_gguf(qwen3moe)
    plan = plan_fit(shape, rec.machine([], 16 * GIB, 12 * GIB), ctx=1024)
    assert plan.verdict == "cpu" and plan.ctx == 1024 and plan.cpu_moe_layers == 0
    kv = m.n_layer * pad_ctx(1024) * m.n_head_kv * 2 * m.head_dim * 2  # K and V, f16
    assert plan.kv_bytes == kv
    expected = qwen3moe.stat().st_size + kv
    assert abs(plan.weights_bytes + plan.kv_bytes - expected) <= 0.1 * expected
    # the header, not the weights, is what the file has beyond its tensors
    assert 0 < qwen3moe.stat().st_size - shape.weights_bytes < 0.02 * shape.weights_bytes


def test_a_30b_a3b_model_on_a_12gb_gpu_keeps_some_layers_experts_in_ram():
    shape = shape_from_numbers(**QWEN3_30B_A3B)
    assert shape.experts is not None and 3.2e9 < shape.active_params < 3.5e9 and 30e9 < shape.n_params < 31e9
    hw = rec.machine([rec.RTX_3060], 64 * GIB, 60 * GIB)
    plan = plan_fit(shape, hw)
    n = plan.cpu_moe_layers
    assert plan.verdict == "partial" and plan.gpu_layers == 49 and 0 < n < 48
    gpu = next(d for d in plan.devices if d.name == "CUDA0")
    assert len(gpu.layers) == 48 and gpu.output
    assert int(gpu.total * 1.1) + GPU_RESERVE_BYTES <= rec.RTX_3060.memory_free
    assert plan.cpu_moe_bytes == n * shape.expert_bytes(0) and plan.devices[0].experts == list(range(n))
    # the fewest layers: one layer's experts fewer and the GPU would not hold the rest
    from runtime.hardware.fit import _Planner

    planner = _Planner(shape, hw, Settings(plan.ctx, plan.kv_type, plan.n_seq, plan.n_batch), None)
    assert planner.gpu_fits(planner.trial(plan.ctx, 49, n)) and not planner.gpu_fits(planner.trial(plan.ctx, 49, n - 1))
    assert f"the experts of {n} of 48 layers in RAM" in plan.message
    report = format_fit_report(plan)
    assert f"--n-cpu-moe {n}" in report and f"experts of {n} layers" in report
    assert "8 of 128 experts, 3.4B of 30.5B weights" in " ".join(plan.notes)


def test_the_speed_of_a_30b_a3b_model_is_that_of_its_active_weights():
    """Decode reads 8/128 of the experts: the prediction is that of the ~3.3B active weights,
    not of 30B (a dense model of the same file, split by whole layers, is 10x slower)."""
    shape = shape_from_numbers(**QWEN3_30B_A3B)
    hw = rec.machine([rec.RTX_3060], 64 * GIB, 60 * GIB)
    plan = plan_fit(shape, hw)
    s = Settings(plan.ctx, plan.kv_type, plan.n_seq, plan.n_batch)
    cpu, gpus = estimate(shape, s, 49, [("CUDA0", 1.0)], cpu_moe=plan.cpu_moe_layers)
    cpu_b, (gpu_b,) = bytes_per_token(shape, s, cpu, gpus, 512)
    e = shape.experts
    assert e is not None
    assert cpu_b == int(plan.cpu_moe_layers * e.layer_bytes[0] * 8 / 128)
    active_weights = shape.weights_bytes - shape.input_bytes - e.total_bytes * 120 / 128
    assert gpu_b == pytest.approx(active_weights - cpu_b + kv_bytes(shape, s, range(48), 512), abs=48)
    seconds = cpu_b / (60e9 * 0.35) + 0.005 + gpu_b / (hw.usable_gpus[0].bandwidth * 0.6)  # uncalibrated
    assert plan.predicted_tokens_per_s == pytest.approx(1 / seconds, rel=1e-6)
    assert 15 < plan.predicted_tokens_per_s < 40
    dense = plan_fit(shape_from_numbers(**DENSE_NUMBERS, n_params=shape.n_params), hw)
    assert dense.verdict == "partial" and dense.cpu_moe_layers == 0 and dense.gpu_layers < 49
    assert plan.predicted_tokens_per_s > 8 * dense.predicted_tokens_per_s
    cpu_only = plan_fit(shape, rec.machine([], 64 * GIB, 60 * GIB))
    dense_cpu = plan_fit(shape_from_numbers(**DENSE_NUMBERS, n_params=shape.n_params), rec.machine([], 64 * GIB, 60 * GIB))
    assert cpu_only.verdict == "cpu" and cpu_only.predicted_tokens_per_s > 7 * dense_cpu.predicted_tokens_per_s


def test_a_gpu_that_holds_the_whole_moe_model_keeps_every_expert():
    plan = plan_fit(shape_from_numbers(**QWEN3_30B_A3B), rec.machine([rec.RTX_4090], 64 * GIB, 60 * GIB))
    assert plan.verdict == "gpu" and plan.cpu_moe_layers == 0 and plan.cpu_moe_bytes == 0
    assert "in RAM" not in plan.message


def test_when_the_gpu_cannot_hold_even_the_attention_whole_layers_are_split():
    """A 2 GB GPU cannot hold the other weights, the KV cache and a layer's experts copied for
    prompt batches: the plan falls back to whole layers, with no experts held apart."""
    plan = plan_fit(shape_from_numbers(**QWEN3_30B_A3B), rec.machine([rec.MX250], 64 * GIB, 60 * GIB))
    assert plan.verdict == "partial" and 0 < plan.gpu_layers < 49 and plan.cpu_moe_layers == 0
    assert "in RAM" not in plan.message


def test_the_catalog_sizes_a_moe_model_from_its_expert_counts_and_parameters():
    numbers = {"layers": 48, "embedding": 2048, "heads": 32, "kv_heads": 4, "head_dim": 128, "vocab": 151936,
               "experts": 128, "experts_used": 8, "file_bytes": 18_600_000_000}
    entry = CatalogEntry("qwen3-30b-a3b", "Qwen3 30B A3B", "qwen3moe", "Apache-2.0", 40960,
                         {"shape": numbers, "params": 30_532_122_624})
    shape = shape_from_catalog(entry)
    assert shape.experts is not None and shape.experts.ff == 768 and shape.n_ff == 6144
    assert 3.2e9 < shape.active_params < 3.5e9


def _catalog_shape(model_id: str, quant: str = "Q4_K_M"):
    from runtime.hardware.model_shape import catalog_shape
    from runtime.store.catalog import load_catalog

    shape = catalog_shape(load_catalog()[model_id], quant)
    assert shape is not None
    return shape


def test_catalog_moe_layers_ungated_experts_and_latent_attention():
    """Nemotron 3 Nano: 23 MoE layers of 52 (the others Mamba-2 or attention), experts of two
    matrices; GLM-4.7-Flash: a dense first layer and latent attention, whose cache holds one
    head of 512 + 64 for K and 512 for V per layer."""
    nemotron = _catalog_shape("nemotron-3-nano-30b-a3b")
    assert nemotron.experts is not None
    assert sum(1 for b in nemotron.experts.layer_bytes if b) == 23 and nemotron.experts.layer_bytes[-1] > 0
    assert nemotron.experts.params == 23 * 128 * 2 * 2688 * 1856  # up and down, no gate
    assert sum(1 for h in nemotron.n_head_kv if h) == 6 and nemotron.state_bytes_per_seq > 0
    glm = _catalog_shape("glm-4.7-flash")
    assert glm.experts is not None and glm.experts.layer_bytes[0] == 0 and all(glm.experts.layer_bytes[1:])
    assert (set(glm.n_head_kv), glm.head_dim_k, glm.head_dim_v) == ({1}, 576, 512)
    assert sum(glm.kv_bytes_per_cell(il, 2) for il in range(glm.n_layer)) == 47 * (576 + 512) * 2
    # the dense first layer is a fraction of a MoE layer's bytes; every MoE layer the same
    assert glm.layer_bytes[0] < glm.layer_bytes[1] / 5 and len(set(glm.layer_bytes[1:])) == 1


def test_per_layer_embeddings_are_looked_up_not_read():
    """Gemma 4 E4B's per-layer token embeddings (42 layers x 256 values for each of 262,144
    tokens) are most of its file beside its layers: they stay with the token embeddings, which
    a token reads one row of, so the decode limit counts only its layers and output."""
    gemma = _catalog_shape("gemma-4-e4b")
    embeddings = 262144 * 2560 + 262144 * 42 * 256
    assert gemma.input_bytes == pytest.approx(gemma.file_bytes * embeddings / gemma.n_params, rel=1e-3)
    assert gemma.input_bytes > sum(gemma.layer_bytes) * 0.7
    assert sum(gemma.swa_layers) == 35 and gemma.sliding_window == 512
