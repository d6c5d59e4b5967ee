"""Model references: every accepted form, and the refusals."""

from __future__ import annotations

import pytest

from runtime.store.catalog import load_catalog
from runtime.store.gguf_names import quant_of, split_part
from runtime.store.refs import BadReference, parse_ref

IDS = frozenset(load_catalog())


@pytest.mark.parametrize("text, kind, fields", [
    ("gemma-3-270m", "catalog", {"catalog_id": "gemma-3-270m", "quant": None}),
    ("llama-3.2-1b:Q8_0", "catalog", {"catalog_id": "llama-3.2-1b", "quant": "Q8_0"}),
    ("llama-3.2-1b:q5_k_m", "catalog", {"catalog_id": "llama-3.2-1b", "quant": "Q5_K_M"}),
    ("bartowski/Llama-3.2-1B-Instruct-GGUF", "hub", {"repo_id": "bartowski/Llama-3.2-1B-Instruct-GGUF", "quant": None}),
    ("bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M", "hub", {"quant": "Q4_K_M", "filename": None}),
    ("hf.co/unsloth/Qwen3-0.6B-GGUF:Q8_0", "hub", {"repo_id": "unsloth/Qwen3-0.6B-GGUF", "quant": "Q8_0"}),
    ("Qwen/Qwen2.5-7B-Instruct-GGUF/qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf", "hub",
     {"repo_id": "Qwen/Qwen2.5-7B-Instruct-GGUF", "filename": "qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf"}),
    ("/models/x.gguf", "path", {}),
    ("./x.gguf", "path", {}),
    ("~/x.gguf", "path", {}),
])
def test_accepted_forms(text, kind, fields):
    ref = parse_ref(text, IDS)
    assert ref.kind == kind
    for key, value in fields.items():
        assert getattr(ref, key) == value


def test_an_existing_relative_file_is_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "owner").mkdir()
    (tmp_path / "owner" / "m.gguf").write_bytes(b"GGUF")
    assert parse_ref("owner/m.gguf", IDS).kind == "path"


@pytest.mark.parametrize("text, says", [
    ("", "empty"),
    ("no-such-model", "unknown model"),
    ("owner/repo:Q4 K M", "not a quantization"),
    ("owner/repo/file.gguf:Q8_0", "names a file"),
    ("a/b/c/d", "unknown model"),
])
def test_refusals_say_why(text, says):
    with pytest.raises(BadReference, match=says):
        parse_ref(text, IDS)


@pytest.mark.parametrize("name, quant", [
    ("Llama-3.2-1B-Instruct-Q4_K_M.gguf", "Q4_K_M"),
    ("qwen2.5-7b-instruct-q5_k_m-00002-of-00003.gguf", "Q5_K_M"),
    ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"),
    ("gemma-3-1b-it-IQ4_XS.gguf", "IQ4_XS"),
    ("model-f16.gguf", "F16"),
    ("Qwen3-8B-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"),
    ("model.gguf", None),
])
def test_quant_from_file_names(name, quant):
    assert quant_of(name) == quant


def test_split_names():
    part = split_part("m-Q4_K_M-00002-of-00003.gguf")
    assert (part.index, part.count) == (2, 3)
    assert part.names() == [f"m-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert split_part("m-Q4_K_M.gguf") is None


def test_a_split_models_shape_counts_every_part(tmp_path):
    """Parts laid out as llama.cpp's gguf-split writes them: metadata in the first, tensors spread."""
    import numpy as np
    from gguf import GGUFWriter

    from runtime.hardware.shape import shape_from_gguf
    from runtime.hardware.model_shape import shape_of_file

    n_embd, n_ff, n_vocab = 64, 128, 256
    layer = {"attn_norm": (n_embd,), "attn_q": (n_embd, n_embd), "attn_k": (16, n_embd), "attn_v": (16, n_embd),
             "attn_output": (n_embd, n_embd), "ffn_norm": (n_embd,), "ffn_gate": (n_ff, n_embd),
             "ffn_up": (n_ff, n_embd), "ffn_down": (n_embd, n_ff)}
    parts = [{"token_embd.weight": (n_vocab, n_embd), **{f"blk.0.{k}.weight": v for k, v in layer.items()}},
             {**{f"blk.1.{k}.weight": v for k, v in layer.items()}, "output_norm.weight": (n_embd,),
              "output.weight": (n_vocab, n_embd)}]
    total = 0
    for i, tensors in enumerate(parts, 1):
        w = GGUFWriter(str(tmp_path / f"m-Q8_0-0000{i}-of-00002.gguf"), "llama")
        if i == 1:
            w.add_block_count(2)
            w.add_context_length(512)
            w.add_embedding_length(n_embd)
            w.add_feed_forward_length(n_ff)
            w.add_head_count(4)
            w.add_head_count_kv(1)
        w.add_uint16("split.no", i - 1)
        w.add_uint16("split.count", 2)
        for name, shape in tensors.items():
            w.add_tensor(name, np.zeros(shape, dtype=np.float32))
            total += int(np.prod(shape)) * 4
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    first = tmp_path / "m-Q8_0-00001-of-00002.gguf"
    assert shape_from_gguf(first).weights_bytes < total
    shape = shape_of_file(first)
    assert shape.weights_bytes == total and shape.n_layer == 2 and all(shape.layer_bytes)
