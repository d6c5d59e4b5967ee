"""GGUF embedding and reranking models through llama.cpp: all-MiniLM-L6-v2 written as a GGUF
BERT by the test (``tests/gguf_bert.py``), against the ONNX reference and the numpy BERT."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.backends.llama_embedder import LlamaEmbedder
from runtime.backends.onnx_embedder import TooLong
from tests.embedding_reference import TEXTS, bert_fp32, cosine, fp32_weights, onnx_reference
from tests.gguf_bert import write_minilm_gguf


def rank_head(seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"cls.weight": rng.standard_normal((384, 384)) * 0.05, "cls.bias": rng.standard_normal(384) * 0.05,
            "cls.output.weight": rng.standard_normal((1, 384)) * 0.3, "cls.output.bias": np.array([0.1])}


def rank_reference(ids: list[int], head: dict, weights, cfg) -> float:
    h = bert_fp32(ids, weights, cfg)[0]
    return float((head["cls.output.weight"] @ np.tanh(head["cls.weight"] @ h + head["cls.bias"]))[0]
                 + head["cls.output.bias"][0])


@pytest.fixture(scope="module")
def bert_gguf(tmp_path_factory):
    return write_minilm_gguf(tmp_path_factory.mktemp("gguf") / "minilm-f16.gguf")


def test_mean_pooled_vectors_match_the_onnx_model(bert_gguf, minilm_path):
    e = LlamaEmbedder(str(bert_gguf), n_ctx=512, threads=2, n_seq=4)
    assert (e.kind, e.pooling, e.dimensions) == ("embedding", "mean", 384)
    enc = e.encode(TEXTS, truncate=True)
    got = e.embed(enc)  # 6 sequences in batches of 4
    assert cosine(got, onnx_reference(minilm_path.parent, TEXTS)).min() >= 0.995
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert cosine(e.embed(e.from_ids([x.ids for x in enc], truncate=True)), got).min() >= 0.99999


def test_a_pooling_asked_for_overrides_the_metadata(bert_gguf, minilm_path):
    e = LlamaEmbedder(str(bert_gguf), pooling="cls", n_ctx=512, threads=2)
    assert e.pooling == "cls"
    ref = onnx_reference(minilm_path.parent, TEXTS, pooling="cls")
    assert cosine(e.embed(e.encode(TEXTS, truncate=True)), ref).min() >= 0.99


def test_truncation_at_the_context(bert_gguf):
    e = LlamaEmbedder(str(bert_gguf), n_ctx=64, threads=2)
    (enc,) = e.encode(["word " * 200], truncate=True)
    assert len(enc.ids) == 64
    with pytest.raises(TooLong):
        e.encode(["word " * 200], truncate=False)


def test_rank_pooling_scores_pairs_as_the_classifier_head_says(tmp_path):
    head = rank_head()
    path = write_minilm_gguf(tmp_path / "minilm-rank.gguf", pooling=4, head=head)
    e = LlamaEmbedder(str(path), n_ctx=512, threads=2)
    assert (e.kind, e.pooling) == ("rerank", "rank")
    docs = ["Paris is the capital of France.", "Cats sleep a lot.", "The weather is nice today."]
    enc = e.encode(["capital of France"] * 3, truncate=True, pairs=docs)
    sep = e.llm.tokenize(b"[SEP]", add_bos=False, special=True)[0]
    assert enc[0].ids[0] == e.llm.token_bos() and enc[0].ids[-1] == sep and enc[0].ids.count(sep) == 2
    weights, cfg = fp32_weights()
    ref = [rank_reference(x.ids, head, weights, cfg) for x in enc]
    assert np.allclose(e.score(enc), ref, atol=0.03)
