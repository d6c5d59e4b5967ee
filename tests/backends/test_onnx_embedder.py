"""The ONNX Runtime embedder against references computed by the test: the same int8 file run
here one text at a time, and the fp32 model through a numpy BERT."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from runtime.backends.onnx_embedder import OnnxEmbedder, TooLong
from runtime.store.onnx_model import read_onnx_model
from tests.embedding_reference import (
    TEXTS, bert_fp32, cosine, fp32_weights, onnx_reference, tiny_cross_encoder, tiny_cross_encoder_scores,
)


@pytest.fixture(scope="module")
def minilm(minilm_path):
    return OnnxEmbedder(read_onnx_model(minilm_path), threads=2, batch_size=4)


def test_the_configuration_is_read_from_the_sentence_transformers_files(minilm_path):
    info = read_onnx_model(minilm_path)
    assert (info.kind, info.pooling, info.normalize, info.max_length, info.dimensions) == (
        "embedding", "mean", True, 256, 384)


def test_batched_vectors_match_the_reference_run_of_the_same_file(minilm, minilm_path):
    texts = TEXTS * 2  # 12 texts of mixed lengths in batches of 4: padding must not change them
    got = minilm.embed(minilm.encode(texts, truncate=True))
    ref = onnx_reference(minilm_path.parent, texts)
    assert got.shape == (12, 384)
    assert cosine(got, ref).min() >= 0.999
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_int8_against_the_fp32_model(minilm):
    weights, cfg = fp32_weights()
    enc = minilm.encode(TEXTS, truncate=True)
    fp32 = []
    for e in enc:
        v = bert_fp32(e.ids, weights, cfg).mean(axis=0)
        fp32.append(v / np.linalg.norm(v))
    cos = cosine(minilm.embed(enc), np.array(fp32))
    print(f"int8 vs fp32 cosine: min {cos.min():.4f}, mean {cos.mean():.4f}")
    assert cos.min() >= 0.99


def test_similar_sentences_are_closer_than_unrelated_ones(minilm):
    v = minilm.embed(minilm.encode(TEXTS[:3], truncate=True))
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2


@pytest.mark.parametrize("pooling", ["cls", "last"])
def test_pooling_and_normalisation_follow_the_config(minilm_path, tmp_path, pooling):
    folder = tmp_path / "m"
    shutil.copytree(minilm_path.parent, folder)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({
        "pooling_mode_cls_token": pooling == "cls", "pooling_mode_mean_tokens": False,
        "pooling_mode_lasttoken": pooling == "last"}))
    modules = [m for m in json.loads((folder / "modules.json").read_text()) if not m["type"].endswith("Normalize")]
    (folder / "modules.json").write_text(json.dumps(modules))
    info = read_onnx_model(folder / "model.onnx")
    assert (info.pooling, info.normalize) == (pooling, False)
    e = OnnxEmbedder(info, threads=1, batch_size=8)
    got = e.embed(e.encode(TEXTS, truncate=True))
    ref = onnx_reference(folder, TEXTS, pooling=pooling, normalize=False)
    assert cosine(got, ref).min() >= 0.999
    assert np.allclose(np.linalg.norm(got, axis=1), np.linalg.norm(ref, axis=1), rtol=1e-3)
    assert not np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-3)


def test_truncation_at_the_maximum_or_a_refusal(minilm, minilm_path):
    long = "word " * 600
    (enc,) = minilm.encode([long], truncate=True)
    assert len(enc.ids) == 256 and enc.ids[-1] == minilm.tokenizer.token_to_id("[SEP]")
    got = minilm.embed([enc])
    assert cosine(got, onnx_reference(minilm_path.parent, [long]))[0] >= 0.999
    with pytest.raises(TooLong) as e:
        minilm.encode(["short", long], truncate=False)
    assert e.value.index == 1 and e.value.limit == 256


def test_token_ids_give_the_vectors_of_their_text(minilm):
    enc = minilm.encode(TEXTS[:2], truncate=True)
    by_ids = minilm.embed(minilm.from_ids([e.ids for e in enc], truncate=True))
    assert cosine(by_ids, minilm.embed(enc)).min() >= 0.99999


def test_a_cross_encoder_scores_pairs_as_the_graph_says(minilm_path, tmp_path):
    ref = tiny_cross_encoder(tmp_path / "ce", minilm_path.parent / "tokenizer.json")
    info = read_onnx_model(tmp_path / "ce" / "model.onnx")
    assert info.kind == "rerank"
    e = OnnxEmbedder(info, threads=1)
    docs = TEXTS[1:]
    got = e.score(e.encode([TEXTS[0]] * len(docs), truncate=True, pairs=docs))
    assert np.allclose(got, tiny_cross_encoder_scores(ref, TEXTS[0], docs), atol=1e-4)
