"""Embeddings and reranking on a live service: OpenAI's and Ollama's endpoints (and their
official clients), the Cohere / Jina and TEI rerank shapes, and the 400s for models that cannot
do what is asked. Vectors are checked against the test's own run of the same ONNX file."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil

import httpx
import numpy as np
import pytest

from tests.embedding_reference import TEXTS, cosine, onnx_reference, tiny_cross_encoder, tiny_cross_encoder_scores

#: a hand-made query set with known answers for the lexical cross-encoder (see ``reranker``):
#: the relevant document repeats the query's words, the others share none of them
QUERIES = [
    ("volcano eruption lava", ["A recipe for lemon cake with icing.", "The volcano eruption sent lava down the slope.",
                               "Football scores from the weekend."], 1),
    ("python programming language", ["Snakes live in warm climates.", "The stock market closed higher.",
                                     "Python is a programming language loved for its readability."], 2),
    ("train timetable london", ["The train timetable for London changes in May.", "Cats sleep a lot.",
                                "Rain is expected tomorrow."], 0),
]


@pytest.fixture(scope="module")
def models(minilm_path, data_dir):
    """The embedded model's folder, a copy that declares Matryoshka dimensions, and the tiny
    cross-encoder, in the data directory (where a request may name files)."""
    root = data_dir / "models" / "embedding-tests"
    mat = root / "minilm-matryoshka"
    shutil.copytree(minilm_path.parent, mat, dirs_exist_ok=True)
    (mat / "hearth.json").write_text(json.dumps({"matryoshka": [384, 256, 128]}))
    ref = tiny_cross_encoder(root / "tiny-ce", minilm_path.parent / "tokenizer.json", dim=256)
    return {"folder": minilm_path.parent, "matryoshka": str(mat / "model.onnx"),
            "reranker": str(root / "tiny-ce" / "model.onnx"), "ce": ref}


def post(server, path, body, status=200):
    r = httpx.post(f"{server.url}{path}", json=body, timeout=120)
    assert r.status_code == status, r.text
    return r.json()


def test_vectors_match_the_reference_of_the_same_file(server, models):
    body = post(server, "/v1/embeddings", {"model": "minilm-l6", "input": TEXTS})
    got = np.array([d["embedding"] for d in sorted(body["data"], key=lambda d: d["index"])])
    assert body["object"] == "list" and body["model"] == "minilm-l6" and got.shape == (len(TEXTS), 384)
    assert cosine(got, onnx_reference(models["folder"], TEXTS)).min() >= 0.999
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-4)  # a Normalize module in modules.json
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > len(TEXTS) * 3


async def test_concurrent_requests_share_batches_and_keep_their_vectors(server, models):
    ref = onnx_reference(models["folder"], TEXTS)
    # one long job among them: the others arrive while it runs, so some rounds hold several
    jobs = [list(range(len(TEXTS))) * 10] + [[i % len(TEXTS), (i + 2) % len(TEXTS)] for i in range(8)]
    async with httpx.AsyncClient(timeout=120) as c:
        replies = await asyncio.gather(*[c.post(f"{server.url}/v1/embeddings", json={
            "model": "minilm-l6", "input": [TEXTS[k] for k in job]}) for job in jobs])
    for job, r in zip(jobs, replies):
        assert r.status_code == 200, r.text
        got = np.array([d["embedding"] for d in r.json()["data"]])
        assert cosine(got, ref[job]).min() >= 0.999
    stats = {m["id"]: m for m in httpx.get(f"{server.url}/hearth/stats", timeout=60).json()["models"]}
    assert stats["minilm-l6"]["embeddings"]["batched_with_others"] >= 2  # requests queued together ran together


def test_base64_decodes_to_the_same_floats(server):
    floats = post(server, "/v1/embeddings", {"model": "minilm-l6", "input": TEXTS[:2]})["data"]
    b64 = post(server, "/v1/embeddings", {"model": "minilm-l6", "input": TEXTS[:2], "encoding_format": "base64"})["data"]
    for f, b in zip(floats, b64):
        assert np.array_equal(np.frombuffer(base64.b64decode(b["embedding"]), dtype="<f4"),
                              np.array(f["embedding"], dtype=np.float32))


def test_token_id_input(server, models):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(models["folder"] / "tokenizer.json"))
    tok.no_padding()
    ids = [tok.encode(t).ids for t in TEXTS[:3]]
    ref = onnx_reference(models["folder"], TEXTS[:3])
    one = post(server, "/v1/embeddings", {"model": "minilm-l6", "input": ids[0]})
    assert cosine(np.array(one["data"][0]["embedding"]), ref[0])[0] >= 0.999
    assert one["usage"]["prompt_tokens"] == len(ids[0])
    many = post(server, "/v1/embeddings", {"model": "minilm-l6", "input": ids})
    assert cosine(np.array([d["embedding"] for d in many["data"]]), ref).min() >= 0.999
    err = post(server, "/v1/embeddings", {"model": "minilm-l6", "input": [[1, 2], [5, 10**7]]}, 400)["error"]
    assert err["param"] == "input[1][1]" and "vocabulary" in err["message"]


def test_truncation_or_a_400_when_the_request_forbids_it(server, models):
    long = "lorem ipsum " * 400
    body = post(server, "/v1/embeddings", {"model": "minilm-l6", "input": [long]})
    assert body["usage"]["prompt_tokens"] == 256
    assert cosine(np.array(body["data"][0]["embedding"]), onnx_reference(models["folder"], [long]))[0] >= 0.999
    err = post(server, "/v1/embeddings", {"model": "minilm-l6", "input": ["ok", long], "truncate": False}, 400)["error"]
    assert err["code"] == "context_length_exceeded" and "input 1" in err["message"] and "256" in err["message"]
    err = post(server, "/api/embed", {"model": "minilm-l6", "input": long, "truncate": False}, 400)
    assert "256" in err["error"]


def test_dimensions_only_where_the_model_allows_matryoshka(server, models):
    err = post(server, "/v1/embeddings", {"model": "minilm-l6", "input": "x", "dimensions": 128}, 400)["error"]
    assert err["param"] == "dimensions" and "Matryoshka" in err["message"]
    full = post(server, "/v1/embeddings", {"model": models["matryoshka"], "input": TEXTS[0]})["data"][0]["embedding"]
    cut = post(server, "/v1/embeddings", {"model": models["matryoshka"], "input": TEXTS[0], "dimensions": 128})
    v = np.array(cut["data"][0]["embedding"])
    assert v.shape == (128,) and abs(np.linalg.norm(v) - 1) < 1e-4
    assert cosine(v, np.array(full[:128]))[0] > 0.99999


def test_the_official_clients(server, models):
    import ollama
    from openai import OpenAI

    ref = onnx_reference(models["folder"], TEXTS[:3])
    oai = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)
    r = oai.embeddings.create(model="minilm-l6", input=TEXTS[:3])  # the client asks for base64
    assert cosine(np.array([d.embedding for d in r.data]), ref).min() >= 0.999
    assert r.usage.prompt_tokens > 0
    client = ollama.Client(host=server.url, timeout=120)
    e = client.embed(model="minilm-l6", input=TEXTS[:3])
    assert cosine(np.array(e.embeddings), ref).min() >= 0.999 and e.prompt_eval_count > 0
    old = client.embeddings(model="minilm-l6", prompt=TEXTS[0])
    assert cosine(np.array(old.embedding), ref[0])[0] >= 0.999


def test_fit_of_an_embedding_model(server):
    fit = httpx.get(f"{server.url}/hearth/fit", params={"model": "minilm-l6"}, timeout=60).json()
    assert fit["verdict"] == "cpu" and fit["fits"] and fit["ctx"] == 256 and fit["gpu_layers"] == 0
    assert 23 << 20 < fit["total_bytes"] < 256 << 20


def test_models_list_shows_the_capability(server):
    post(server, "/v1/embeddings", {"model": "minilm-l6", "input": "load it"})
    models = {m["id"]: m for m in httpx.get(f"{server.url}/v1/models", timeout=60).json()["data"]}
    assert models["minilm-l6"]["capabilities"] == ["embedding"] and models["minilm-l6"]["loaded"]
    assert "embedding" not in models["smollm2-135m"]["capabilities"]


def test_models_that_cannot_do_what_is_asked_are_a_clear_400(server, models):
    err = post(server, "/v1/embeddings", {"model": "smollm2-135m", "input": "x"}, 400)["error"]
    assert err["param"] == "model" and err["code"] == "model_not_supported" and "text-generation" in err["message"]
    err = post(server, "/v1/chat/completions", {"model": "minilm-l6", "messages": [{"role": "user", "content": "hi"}]},
               400)["error"]
    assert "embedding model" in err["message"] and err["param"] == "model"
    assert "embedding model" in post(server, "/api/chat", {"model": "minilm-l6", "messages": [
        {"role": "user", "content": "hi"}], "stream": False}, 400)["error"]
    for path, body in [("/v1/completions", {"prompt": "hi"}), ("/v1/messages", {"max_tokens": 4, "messages": [
            {"role": "user", "content": "hi"}]}), ("/v1/responses", {"input": "hi"})]:
        r = httpx.post(f"{server.url}{path}", json={"model": "minilm-l6", **body}, timeout=60)
        assert r.status_code == 400 and "embedding model" in r.text, (path, r.text)
    err = post(server, "/v1/rerank", {"model": "minilm-l6", "query": "q", "documents": ["a"]}, 400)["error"]
    assert "not a reranker" in err["message"]
    err = post(server, "/v1/embeddings", {"model": models["reranker"], "input": "x"}, 400)["error"]
    assert "reranker" in err["message"]
    for body, field in [({"input": []}, "input"), ({"input": [1, "a"]}, "input"), ({"input": [""]}, "input[0]"),
                        ({"input": "x", "encoding_format": "hex"}, "encoding_format"),
                        ({"input": "x", "dimensions": 0}, "dimensions")]:
        assert post(server, "/v1/embeddings", {"model": "minilm-l6", **body}, 400)["error"]["param"] == field


def test_rerank_orders_a_hand_made_query_set(server, models):
    for query, docs, answer in QUERIES:
        body = post(server, "/v1/rerank", {"model": models["reranker"], "query": query, "documents": docs,
                                           "return_documents": True})
        logits = tiny_cross_encoder_scores(models["ce"], query, docs)
        results = body["results"]
        assert [r["index"] for r in results] == list(np.argsort(-logits))
        assert results[0]["index"] == answer and results[0]["document"]["text"] == docs[answer]
        assert np.allclose([r["relevance_score"] for r in results], 1 / (1 + np.exp(-np.sort(logits)[::-1])), atol=1e-4)
        top = post(server, "/v1/rerank", {"model": models["reranker"], "query": query, "documents": docs, "top_n": 1})
        assert [r["index"] for r in top["results"]] == [answer] and "document" not in top["results"][0]
        tei = post(server, "/rerank", {"query": query, "texts": docs, "raw_scores": True})  # the loaded reranker
        assert [t["index"] for t in tei] == list(np.argsort(-logits))
        assert np.allclose([t["score"] for t in tei], np.sort(logits)[::-1], atol=1e-4)
    models_list = {m["id"]: m for m in httpx.get(f"{server.url}/v1/models", timeout=60).json()["data"]}
    assert models_list[models["reranker"]]["capabilities"] == ["rerank"]


@pytest.fixture(scope="module")
def ggufs(data_dir):
    from tests.backends.test_llama_embedder import rank_head
    from tests.gguf_bert import write_minilm_gguf

    root = data_dir / "models" / "embedding-tests"
    root.mkdir(parents=True, exist_ok=True)
    head = rank_head()
    return {"embed": str(write_minilm_gguf(root / "minilm-f16.gguf")),
            "rank": str(write_minilm_gguf(root / "minilm-rank.gguf", pooling=4, head=head)), "head": head}


def test_gguf_embedding_and_reranker_models_through_llama_cpp(server, models, ggufs):
    body = post(server, "/v1/embeddings", {"model": ggufs["embed"], "input": TEXTS})
    got = np.array([d["embedding"] for d in body["data"]])
    assert cosine(got, onnx_reference(models["folder"], TEXTS)).min() >= 0.995
    caps = {m["id"]: m["capabilities"] for m in httpx.get(f"{server.url}/v1/models", timeout=60).json()["data"]}
    assert caps[ggufs["embed"]] == ["embedding"]
    docs = ["Paris is the capital of France.", "Cats sleep a lot.", "The weather is nice today."]
    ranked = post(server, "/v1/rerank", {"model": ggufs["rank"], "query": "capital of France", "documents": docs})
    from tests.backends.test_llama_embedder import rank_reference
    from tests.embedding_reference import fp32_weights
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(models["folder"] / "tokenizer.json"))
    tok.no_padding()
    weights, cfg = fp32_weights()
    ref = np.array([rank_reference(tok.encode("capital of France", d).ids, ggufs["head"], weights, cfg) for d in docs])
    assert [r["index"] for r in ranked["results"]] == list(np.argsort(-ref))
    assert np.allclose([r["relevance_score"] for r in ranked["results"]], 1 / (1 + np.exp(-np.sort(ref)[::-1])), atol=0.01)
    err = post(server, "/v1/embeddings", {"model": ggufs["rank"], "input": "x"}, 400)["error"]
    assert "reranker" in err["message"]


def test_ollama_listings_describe_the_onnx_model(server):
    post(server, "/api/embed", {"model": "minilm-l6", "input": "load it"})
    tags = {m["name"]: m for m in httpx.get(f"{server.url}/api/tags", timeout=60).json()["models"]}
    assert tags["minilm-l6:latest"]["details"]["format"] == "onnx"
    shown = post(server, "/api/show", {"model": "minilm-l6"})
    assert shown["capabilities"] == ["embedding"] and shown["model_info"]["onnx.dimensions"] == 384
    assert "minilm-l6:latest" in {m["name"] for m in httpx.get(f"{server.url}/api/ps", timeout=60).json()["models"]}
