"""Chat templates stored for a model (owner-only files named after the model's id) and the
template, BOS and EOS read from a GGUF's header without loading it."""

from __future__ import annotations

import os
import stat

import pytest

from runtime.store.gguf_file import read_token_texts
from runtime.store.model_templates import (
    MODEL, STORED, GIVEN, gguf_template, remove_template, store_template, stored_template, template_for, template_path,
)
from tests.store.test_gguf_file import tiny_gguf


@pytest.mark.parametrize("fixture", ["smollm2_path", "gemma_path"])
def test_the_header_gives_what_llama_cpp_gives(request, fixture):
    from runtime.backends.llama import ContextConfig, LlamaBackend

    path = request.getfixturevalue(fixture)
    backend = LlamaBackend(path, ContextConfig(n_ctx=256, n_seq_max=1, n_batch=32))
    try:
        loaded = backend.chat_template
        read = gguf_template(path)
        assert (read.source, read.bos, read.eos) == (loaded.source, loaded.bos, loaded.eos)
        assert read.bos and read.eos and read.origin == MODEL
    finally:
        backend.close()


def test_token_texts_are_read_by_id(tmp_path):
    path = tiny_gguf(tmp_path / "t.gguf")  # tokens <s>, </s>, a, b
    assert read_token_texts(path, {0, 3, 99}) == {0: "<s>", 3: "b"}
    assert read_token_texts(path, set()) == {}
    t = gguf_template(path)  # no template and no BOS/EOS ids in its header
    assert (t.source, t.bos, t.eos) == (None, "", "")


@pytest.mark.skipif(os.name != "posix", reason="POSIX modes")
@pytest.mark.parametrize("model_id", ["smollm2-135m", "bartowski/Qwen3-8B-GGUF:Q4_K_M", "/models/a b.gguf",
                                      "..", "x" * 400])
def test_a_stored_template_round_trip_owner_only(tmp_path, model_id):
    data = tmp_path / "data"
    assert stored_template(data, model_id) is None
    path = store_template(data, model_id, "{{ messages[0].content }}")
    assert path.parent == data / "templates" and path.name.endswith(".jinja") and len(path.name) < 200
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stored_template(data, model_id) == "{{ messages[0].content }}"
    assert stored_template(data, model_id + "x") is None  # one file per id
    assert remove_template(data, model_id) and not remove_template(data, model_id)
    assert stored_template(data, model_id) is None


def test_ids_that_differ_get_different_files(tmp_path):
    ids = ["a/b", "a%2Fb", "a:b", "a_b", "x" * 400, "x" * 401]
    assert len({template_path(tmp_path, i) for i in ids}) == len(ids)


def test_a_given_template_comes_before_a_stored_one(tmp_path, smollm2_path):
    own = gguf_template(smollm2_path)
    assert template_for(tmp_path, "m", smollm2_path) == own
    store_template(tmp_path, "m", "stored {{ messages[0].content }}")
    stored = template_for(tmp_path, "m", smollm2_path)
    assert (stored.source, stored.origin, stored.bos) == ("stored {{ messages[0].content }}", STORED, own.bos)
    given = template_for(tmp_path, "m", smollm2_path, given="given")
    assert (given.source, given.origin) == ("given", GIVEN)
