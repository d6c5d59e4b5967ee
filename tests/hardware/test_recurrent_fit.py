"""The fit planner on a recurrent model: its state does not grow with the context."""

from __future__ import annotations

from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.hardware.fit import plan_fit
from runtime.hardware.report import format_fit_report
from runtime.hardware.shape import shape_from_gguf
from tests.engine.tiny_recurrent import write_tiny_mamba
from tests.hardware.test_fit import CPU_ONLY_32G


def test_a_mamba_state_is_sized_per_sequence_as_llama_cpp_saves_it(tmp_path):
    path = write_tiny_mamba(tmp_path / "m.gguf", n_layer=3, n_embd=32, d_state=16, d_conv=4)
    shape = shape_from_gguf(path)
    # per layer: conv state (d_conv - 1) x d_inner and SSM state d_state x d_inner, f32
    d_inner = 64
    assert shape.state_bytes == (4 * (3 * d_inner + 16 * d_inner),) * 3
    assert shape.to_dict()["recurrent_layers"] == 3 and shape.recurrent
    b = LlamaBackend(path, ContextConfig(n_ctx=256, n_seq_max=2, n_batch=32))
    try:
        b.batch.clear()
        b.batch.add([3, 4, 5, 6], 0, 0, True)
        b.decode(b.batch)
        saved = len(b.state_seq_save(0, partial=True))
    finally:
        b.close()
    # llama.cpp's saved state: the state rows plus a few small headers
    assert shape.state_bytes_per_seq <= saved <= shape.state_bytes_per_seq + 256


def test_the_plan_counts_the_state_once_per_sequence_at_any_context(tmp_path):
    shape = shape_from_gguf(write_tiny_mamba(tmp_path / "m.gguf"))
    small = plan_fit(shape, CPU_ONLY_32G, ctx=1024, n_seq=4)
    large = plan_fit(shape, CPU_ONLY_32G, ctx=4096, n_seq=4)
    assert small.kv_bytes == large.kv_bytes == small.state_bytes == 4 * shape.state_bytes_per_seq
    assert plan_fit(shape, CPU_ONLY_32G, ctx=1024, n_seq=8).state_bytes == 2 * small.state_bytes
    assert "recurrent state" in format_fit_report(small)
    assert small.to_dict()["state_bytes"] == small.state_bytes


def test_a_transformer_has_no_recurrent_state(smollm2_path):
    shape = shape_from_gguf(smollm2_path)
    assert not shape.recurrent and plan_fit(shape, CPU_ONLY_32G).state_bytes == 0


def test_catalog_recurrent_and_hybrid_models_are_sized_with_their_state():
    from runtime.hardware.catalog_shape import shape_from_catalog
    from runtime.store.catalog import CatalogEntry, load_catalog

    def shape(model_id):
        e = load_catalog()[model_id]
        raw = {**e.raw, "shape": {**e.raw["shape"], "file_bytes": e.estimated_bytes()}}
        return shape_from_catalog(CatalogEntry(e.id, e.name, e.family, e.license, e.context_length, raw))

    rwkv, lfm2 = shape("rwkv6-1.6b"), shape("lfm2-350m")
    # RWKV-6: token shift 2 x n_embd and WKV state n_embd x head size, f32, in all 24 layers
    assert rwkv.state_bytes_per_seq == 24 * 4 * (2 * 2048 + 2048 * 64) and max(rwkv.n_head_kv) == 0
    small = plan_fit(rwkv, CPU_ONLY_32G, ctx=1024, n_seq=4)
    assert small.kv_bytes == plan_fit(rwkv, CPU_ONLY_32G, ctx=4096, n_seq=4).kv_bytes == small.state_bytes
    # LFM2: 10 short-convolution layers with a state, 6 attention layers whose KV grows
    assert sum(1 for b in lfm2.state_bytes if b) == 10 and sum(1 for h in lfm2.n_head_kv if h) == 6
    a = plan_fit(lfm2, CPU_ONLY_32G, ctx=1024, n_seq=4)
    b = plan_fit(lfm2, CPU_ONLY_32G, ctx=4096, n_seq=4)
    assert a.state_bytes == b.state_bytes == 4 * 81920 and b.kv_bytes > a.kv_bytes
