"""ModelShape from real GGUF headers, tiny generated files, catalog numbers, and broken files.

Expected sizes are worked out by hand from the tensor shapes and ggml block sizes
(Q4_1: 32 weights in 20 bytes, Q5_0: 32 in 22, Q8_0: 32 in 34, Q4_K: 256 in 144,
Q6_K: 256 in 210, F16: 2 bytes, F32: 4 bytes).
"""

from __future__ import annotations

import pytest

from runtime.config import SWA_HOLDER_SEQS
from runtime.hardware.memory import Settings, kv_bytes, pad_ctx
from runtime.hardware.catalog_shape import shape_from_catalog, shape_from_numbers
from runtime.hardware.shape import ModelShapeError, shape_from_gguf
from runtime.store.catalog import CatalogEntry
from runtime.store.gguf_file import InvalidModelFile
from tests.hardware.ggufs import write_model


def test_smollm2_header(smollm2_path):
    s = shape_from_gguf(smollm2_path)
    assert (s.architecture, s.n_layer, s.n_head, s.n_head_kv[0]) == ("llama", 30, 9, 3)
    assert (s.head_dim_k, s.head_dim_v, s.n_embd, s.n_ff) == (64, 64, 576, 1536)
    assert (s.n_vocab, s.ctx_train, s.sliding_window) == (49152, 8192, 0)
    # Q4_1 matrices: q and o 576x576, k and v 576x192, three 576x1536 FFN; two f32 norms
    q4_1 = lambda n: n // 32 * 20  # noqa: E731
    layer = 2 * q4_1(576 * 576) + 2 * q4_1(576 * 192) + 3 * q4_1(576 * 1536) + 2 * 576 * 4
    assert layer == 2216448
    assert s.layer_bytes == (layer,) * 30
    assert s.input_bytes == 576 * 49152 // 32 * 34  # Q8_0 token embeddings
    assert s.tied_output and s.output_bytes == 576 * 4  # only the output norm is separate
    assert s.output_matrix_bytes == s.output_bytes + s.input_bytes
    assert s.weights_bytes == 30 * layer + s.input_bytes + 576 * 4


def test_gemma3_header_sliding_window(gemma_path):
    s = shape_from_gguf(gemma_path)
    assert (s.architecture, s.n_layer, s.n_head, s.n_head_kv[0]) == ("gemma3", 18, 4, 1)
    assert (s.head_dim_k, s.head_dim_v, s.n_embd, s.n_vocab) == (256, 256, 640, 262144)
    assert (s.ctx_train, s.sliding_window) == (32768, 512)
    # gemma3: five sliding layers, then one global
    assert [il for il in range(18) if not s.swa_layers[il]] == [5, 11, 17]
    assert s.swa_assumed  # the file has no pattern key
    # Q4_K_M mixes types: two layer variants, nine of each
    common = 112640 + 450560 + 368640 + 2 * 901120 + 4 * 640 * 4 + 2 * 256 * 4
    variant_a = common + 640 * 256 // 32 * 22 + 640 * 2048 // 256 * 144  # v Q5_0, down Q4_K
    variant_b = common + 640 * 256 // 32 * 34 + 640 * 2048 // 256 * 210  # v Q8_0, down Q6_K
    assert sorted(set(s.layer_bytes)) == [variant_a, variant_b] == [3596288, 3995648]
    assert sum(s.layer_bytes) == 9 * (variant_a + variant_b)
    assert s.input_bytes == 640 * 262144 // 32 * 34


def test_gemma3_kv_with_and_without_full_swa(gemma_path):
    s = shape_from_gguf(gemma_path)
    per_cell = 1 * (256 + 256) * 2  # one KV head, f16 K and V
    full = Settings(ctx=8192, n_seq=4, n_batch=512, swa_full=True)
    assert kv_bytes(s, full) == 18 * 8192 * per_cell
    # swa_full off: sliding layers keep pad256(min(ctx, 512 * 4 seqs + 512 batch)) = 2560 cells
    windowed = Settings(ctx=8192, n_seq=4, n_batch=512, swa_full=False, holders=0)
    assert kv_bytes(s, windowed) == 3 * 8192 * per_cell + 15 * 2560 * per_cell
    assert kv_bytes(s, windowed) == int(61.5 * (1 << 20))  # llama.cpp logs 24.00 + 37.50 MiB
    # the default: off, and the worker's two holders beside the 4 running sequences
    assert Settings(ctx=8192).holders == SWA_HOLDER_SEQS == 2
    held = Settings(ctx=8192, n_seq=4, n_batch=512)
    assert kv_bytes(s, held) == 3 * 8192 * per_cell + 15 * pad_ctx(512 * 6 + 512) * per_cell


def test_tiny_gqa_model_sizes(tmp_path):
    path = write_model(tmp_path / "gqa.gguf", n_layer=4, n_embd=64, n_head=8, n_head_kv=2, n_ff=128,
                       n_vocab=256)
    s = shape_from_gguf(path)
    head = 64 // 8
    layer = 64 * 4 * 2 + 2 * 64 * 64 * 2 + 2 * (2 * head) * 64 * 2 + 3 * 128 * 64 * 2
    assert layer == 70144
    assert s.layer_bytes == (layer,) * 4
    assert s.input_bytes == 256 * 64 * 2
    assert not s.tied_output and s.output_bytes == 64 * 4 + 256 * 64 * 2
    assert (s.n_head_kv, s.head_dim_k) == ((2, 2, 2, 2), 8)
    for kv_type, per_element in (("f16", 2), ("q8_0", 34 / 32), ("q4_0", 18 / 32)):
        per_cell = 4 * 2 * (8 + 8) * per_element
        assert kv_bytes(s, Settings(ctx=1024, kv_type=kv_type)) == int(per_cell * 1024)


def test_tiny_model_with_window_and_bool_pattern(tmp_path):
    path = write_model(tmp_path / "swa.gguf", arch="gemma3", n_layer=4, window=128,
                       pattern=[True, False, True, True])
    s = shape_from_gguf(path)
    assert s.swa_layers == (True, False, True, True) and not s.swa_assumed
    per_cell = 2 * (8 + 8) * 2
    # sliding layers: pad256(min(1024, 128 * 2 seqs + 64 batch = 320)) = 512 cells
    s_off = Settings(ctx=1024, n_seq=2, n_batch=64, swa_full=False, holders=0)
    assert kv_bytes(s, s_off) == per_cell * (1024 + 3 * 512)
    assert kv_bytes(s, Settings(ctx=1024, n_seq=2, n_batch=64, swa_full=True)) == per_cell * 4 * 1024
    # two holders more: pad256(128 * 4 + 64 = 576) = 768 cells
    assert kv_bytes(s, Settings(ctx=1024, n_seq=2, n_batch=64)) == per_cell * (1024 + 3 * 768)


def test_int_pattern_and_unknown_architecture(tmp_path):
    s = shape_from_gguf(write_model(tmp_path / "p3.gguf", arch="gemma2", n_layer=6, window=64, pattern=3))
    assert s.swa_layers == (True, True, False, True, True, False)
    # An architecture llama.cpp has no pattern for: every layer counted as global.
    s = shape_from_gguf(write_model(tmp_path / "x.gguf", arch="llama", n_layer=3, window=64))
    assert s.swa_layers == (False, False, False) and s.swa_assumed


def test_missing_head_count_kv_means_no_grouping(tmp_path):
    s = shape_from_gguf(write_model(tmp_path / "mha.gguf", n_head_kv=8, skip=("head_count_kv",)))
    assert s.n_head_kv == (8,) * 4


@pytest.mark.parametrize("key, gguf_key", [
    ("block_count", "block_count"), ("embedding_length", "embedding_length"),
    ("context_length", "context_length"), ("head_count", "attention.head_count"),
])
def test_missing_key_is_a_clear_error(tmp_path, key, gguf_key):
    path = write_model(tmp_path / "broken.gguf", skip=(key,))
    with pytest.raises(ModelShapeError, match=f"no 'llama.{gguf_key}'") as err:
        shape_from_gguf(path)
    assert "broken.gguf" in str(err.value) and "download it again" in str(err.value)


def test_truncated_file(tmp_path, smollm2_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(smollm2_path.read_bytes()[: 4 << 20])
    with pytest.raises(InvalidModelFile, match="truncated"):
        shape_from_gguf(cut)


def test_non_gguf_file(tmp_path):
    text = tmp_path / "notes.gguf"
    text.write_text("these are not the weights you are looking for\n" * 10)
    with pytest.raises(InvalidModelFile, match="not a GGUF file"):
        shape_from_gguf(text)


MISTRAL_7B_Q4_K_M = dict(
    name="Mistral 7B Instruct Q4_K_M", architecture="llama", file_bytes=4_368_439_584, n_layer=32,
    n_head=32, n_head_kv=8, head_dim=128, n_embd=4096, n_vocab=32000, ctx_train=32768, n_ff=14336,
)


def test_shape_from_catalog_numbers():
    s = shape_from_numbers(**MISTRAL_7B_Q4_K_M)
    per_layer = 2 * 4096 * 32 * 128 + 2 * 4096 * 8 * 128 + 3 * 4096 * 14336
    params = 32 * per_layer + 2 * 32000 * 4096
    assert s.n_params == params == 7_241_465_856
    per_param = 4_368_439_584 / params
    assert s.layer_bytes[0] == int(per_layer * per_param)
    assert s.input_bytes == s.output_bytes == int(32000 * 4096 * per_param)
    assert abs(s.weights_bytes - 4_368_439_584) < 64  # rounding per tensor group only
    assert 4.7 < s.bits_per_weight < 5.0  # Q4_K_M is about 4.8 bits a weight


def test_catalog_entry_with_and_without_shape():
    numbers = {"file_bytes": 4_368_439_584, "layers": 32, "heads": 32, "kv_heads": 8, "head_dim": 128,
               "embedding": 4096, "vocab": 32000, "ff": 14336}
    entry = CatalogEntry("mistral-7b", "Mistral 7B", "llama", "Apache-2.0", 32768, {"shape": numbers})
    s = shape_from_catalog(entry)
    assert (s.ctx_train, s.n_layer, s.source) == (32768, 32, "catalog")
    bare = CatalogEntry("x", "X", "llama", "MIT", 4096, {})
    with pytest.raises(ModelShapeError, match="catalog model x has no file_bytes"):
        shape_from_catalog(bare)
