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
