"""Pulling an ONNX catalog model from the (loopback) hub: the graph and its tokenizer and
configuration files land in the Hugging Face cache, and the model resolves and runs."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.store.downloads import DownloadManager
from runtime.store.fetch import RetryPolicy
from runtime.store.onnx_model import read_onnx_model
from runtime.store.resolve import resolve_model
from tests.embedding_reference import TEXTS, tiny_cross_encoder, tiny_cross_encoder_scores


@pytest.fixture()
async def manager(loopback_hub, tmp_path):
    m = DownloadManager(tmp_path / "downloads.json", retry=RetryPolicy(attempts=3, backoff_s=0.05))
    await m.start()
    yield m
    await m.close()


async def test_a_reranker_pull_brings_its_tokenizer_and_config(loopback_hub, tmp_path, manager, minilm_path, data_dir):
    ref = tiny_cross_encoder(tmp_path / "src", minilm_path.parent / "tokenizer.json")
    src = tmp_path / "src"
    loopback_hub.add_repo("jinaai/jina-reranker-v1-tiny-en", {
        "onnx/model_quantized.onnx": (src / "model.onnx").read_bytes(), "onnx/model.onnx": b"not this precision",
        "tokenizer.json": (src / "tokenizer.json").read_bytes(), "config.json": (src / "config.json").read_bytes(),
        "README.md": b"# tiny\n"})
    d = await manager.wait((await manager.pull("jina-reranker-v1-tiny")).id)
    assert d.state == "completed", d.error
    assert loopback_hub.gets("jinaai/jina-reranker-v1-tiny-en", "onnx/model.onnx") == 0
    model = resolve_model("jina-reranker-v1-tiny", data_dir)
    assert model.path.name == "model_quantized.onnx"
    info = read_onnx_model(model.path)
    assert info.kind == "rerank" and info.tokenizer_file.parent == model.path.parent.parent

    from runtime.backends.onnx_embedder import OnnxEmbedder

    e = OnnxEmbedder(info, threads=1)
    got = e.score(e.encode([TEXTS[0]] * 3, truncate=True, pairs=TEXTS[1:4]))
    assert np.allclose(got, tiny_cross_encoder_scores(ref, TEXTS[0], TEXTS[1:4]), atol=1e-4)


async def test_an_onnx_repo_without_a_tokenizer_is_refused_with_the_reason(loopback_hub, manager):
    loopback_hub.add_repo("BAAI/bge-small-en-v1.5", {"onnx/model.onnx": b"graph", "config.json": b"{}"})
    with pytest.raises(Exception, match="tokenizer.json"):
        await manager.pull("bge-small-en-v1.5")


def test_catalog_settings_reach_the_model(minilm_path):
    from runtime.server.models.embed_engines import catalog_settings

    assert catalog_settings("nomic-embed-text-v1.5")["matryoshka"] == [768, 512, 256, 128, 64]
    info = read_onnx_model(minilm_path, {"matryoshka": [384, 128]})
    assert info.matryoshka == (384, 128)


async def test_external_weights_and_the_catalogs_companions_come_along(loopback_hub, tmp_path, manager, minilm_path):
    from runtime.store.hf_cache import find_snapshot

    files = {"onnx/model.onnx": b"graph", "onnx/model.onnx_data": b"weights" * 100,
             "tokenizer.json": (minilm_path.parent / "tokenizer.json").read_bytes(),
             "modules.json": (minilm_path.parent / "modules.json").read_bytes(),
             "1_Pooling/config.json": (minilm_path.parent / "1_Pooling" / "config.json").read_bytes(),
             "pytorch_model.bin": b"not needed"}
    loopback_hub.add_repo("BAAI/bge-small-en-v1.5", files)
    d = await manager.wait((await manager.pull("bge-small-en-v1.5")).id)
    assert d.state == "completed", d.error
    for name in ("onnx/model.onnx", "onnx/model.onnx_data", "tokenizer.json", "modules.json", "1_Pooling/config.json"):
        assert find_snapshot("BAAI/bge-small-en-v1.5", name).read_bytes() == files[name], name
    assert loopback_hub.gets("BAAI/bge-small-en-v1.5", "pytorch_model.bin") == 0
    info = read_onnx_model(find_snapshot("BAAI/bge-small-en-v1.5", "onnx/model.onnx"))
    assert (info.pooling, info.normalize) == ("mean", True)
