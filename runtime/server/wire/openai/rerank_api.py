"""Reranking with a cross-encoder: ``POST /v1/rerank`` in the Cohere / Jina shape and
``POST /rerank`` in Text Embeddings Inference's shape.

A cross-encoder reads the query and one document together and gives a relevance logit; the
Cohere shape's ``relevance_score`` is its sigmoid (0..1), TEI's ``score`` too unless
``raw_scores``. Results are sorted by score, highest first. A model that is not a reranker
(an embedding or a chat model) is a 400 that says so.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from aiohttp import web

from runtime.server import validation as v
from runtime.server.app_keys import MANAGER
from runtime.server.models.embed_engines import RERANK
from runtime.server.generate.embed_run import MAX_INPUTS, run_score
from runtime.server.errors import bad_request
from runtime.server.wire.openai.embeddings_api import live_encoder


if TYPE_CHECKING:  # numpy loads with the first embedding request, not with the service
    import numpy as np


def _documents(raw, field: str) -> list[str]:
    if not isinstance(raw, list) or not raw:
        raise bad_request(f"'{field}' must be a non-empty list of strings", field)
    if len(raw) > MAX_INPUTS:
        raise bad_request(f"'{field}' has {len(raw)} entries; the limit is {MAX_INPUTS}", field)
    out = []
    for i, d in enumerate(raw):
        if isinstance(d, dict) and "text" in d:  # Cohere's and Jina's {"text": ...} documents
            d = d["text"]
        out.append(v.text(d, f"{field}[{i}]"))
    return out


def _sigmoid(x: np.ndarray) -> np.ndarray:
    import numpy as np

    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


def _model(request: web.Request, body: dict) -> str:
    m = body.get("model")
    if m is not None:
        return v.text(m, "model", empty=False, max_chars=1024)
    for r in request.app[MANAGER].router.residents:  # TEI's clients name no model: a loaded reranker
        info = getattr(r.engine, "info", None)  # an embedding worker's Loaded.info
        if r.engine.alive and isinstance(info, dict) and info.get("kind") == RERANK:
            return r.model_id
    raise bad_request("'model' is required: the id of a reranking model (a cross-encoder such as "
                      "bge-reranker-base); no reranker is loaded", "model")


async def _scores(request: web.Request, body: dict, docs_field: str):
    model = _model(request, body)
    query = v.text(body.get("query"), "query", empty=False) if body.get("query") is not None else None
    if query is None:
        raise bad_request("'query' is required: the text the documents are ranked against", "query")
    docs = _documents(body.get(docs_field), docs_field)
    truncate = v.boolean(body, "truncate", True)
    engine = await live_encoder(request, model, RERANK)
    logits, n_tokens = await run_score(engine, query, docs, truncate)
    return engine, docs, logits, n_tokens


async def rerank(request: web.Request) -> web.Response:
    body = v.require_object(await v.read_json(request))
    top_n = v.integer(body, "top_n", 1, MAX_INPUTS)
    return_documents = v.boolean(body, "return_documents", False)
    engine, docs, logits, n_tokens = await _scores(request, body, "documents")
    scores = _sigmoid(logits)
    order = sorted(range(len(docs)), key=lambda i: -scores[i])[:top_n or len(docs)]
    results = []
    for i in order:
        r: dict[str, Any] = {"index": i, "relevance_score": float(scores[i])}
        if return_documents:
            r["document"] = {"text": docs[i]}
        results.append(r)
    return web.json_response({"id": f"rerank-{uuid.uuid4().hex[:16]}", "model": engine.model_id, "results": results,
                              "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}})


async def tei_rerank(request: web.Request) -> web.Response:
    import numpy as np

    body = v.require_object(await v.read_json(request))
    raw = v.boolean(body, "raw_scores", False)
    return_text = v.boolean(body, "return_text", False)
    _, docs, logits, _ = await _scores(request, body, "texts")
    scores = logits.astype(np.float64) if raw else _sigmoid(logits)
    out = []
    for i in sorted(range(len(docs)), key=lambda i: -scores[i]):
        r = {"index": i, "score": float(scores[i])}
        if return_text:
            r["text"] = docs[i]
        out.append(r)
    return web.json_response(out)


ROUTES = [
    ("POST", "/v1/rerank", rerank),
    ("POST", "/rerank", tei_rerank),
]
