"""Embeddings: OpenAI's ``POST /v1/embeddings``, Ollama's ``POST /api/embed`` and the older
``POST /api/embeddings``, over one embedding worker per model (``runtime.engine.embed_client``).

OpenAI's ``input`` is a string, a list of strings, a list of token ids or a list of such lists;
``encoding_format`` ``float`` or ``base64`` (little-endian float32, as OpenAI sends it);
``dimensions`` only for models trained for Matryoshka truncation; ``truncate`` (Hearth's, as
Ollama's and TEI's): false makes an over-long input a 400 instead of cutting it at the model's
maximum length.
"""

from __future__ import annotations

import base64
import time

import orjson
from aiohttp import web

from runtime.server import validation as v
from runtime.server.models.embed_engines import EMBEDDING, LiveEncoder
from runtime.server.generate.embed_run import DEFAULT_EMBEDDING_MODEL, MAX_INPUTS, encoder_for, run_embed, shorten
from runtime.server.errors import bad_request
from runtime.server.models.keep_alive import parse_keep_alive


def _is_ids(x) -> bool:
    return isinstance(x, list) and bool(x) and all(isinstance(t, int) and not isinstance(t, bool) for t in x)


def parse_input(raw, field: str = "input") -> tuple[list[str] | None, list[list[int]] | None]:
    """(texts, None) or (None, token-id rows); a 400 naming the field otherwise."""
    if isinstance(raw, str):
        return [v.text(raw, field, empty=False)], None
    if not isinstance(raw, list) or not raw:
        raise bad_request(f"'{field}' must be a string, a list of strings, a list of token ids or a list of "
                          "lists of token ids (not empty)", field)
    if len(raw) > MAX_INPUTS:
        raise bad_request(f"'{field}' has {len(raw)} entries; the limit is {MAX_INPUTS}", field)
    if all(isinstance(x, str) for x in raw):
        return [v.text(x, f"{field}[{i}]", empty=False) for i, x in enumerate(raw)], None
    if _is_ids(raw):
        return None, [v.token_ids(raw, field)]
    if all(isinstance(x, list) for x in raw):
        return None, [v.token_ids(x, f"{field}[{i}]") for i, x in enumerate(raw)]
    raise bad_request(f"'{field}' mixes kinds: give strings only, or token ids only", field)


async def live_encoder(request: web.Request, ref: str, task: str, keep_alive: float | None = None) -> LiveEncoder:
    """The encoder for ``ref``; a job whose worker dies before answering runs again on a new one."""
    engine = await encoder_for(request, ref, task, keep_alive)
    return LiveEncoder(engine, lambda: encoder_for(request, ref, task, keep_alive))


def _dimensions(body: dict) -> int | None:
    return v.integer(body, "dimensions", 1, 1 << 16)


def _model(body: dict) -> str:
    m = body.get("model")
    if m is None:
        return DEFAULT_EMBEDDING_MODEL
    return v.text(m, "model", empty=False, max_chars=1024)


async def openai_embeddings(request: web.Request) -> web.Response:
    import numpy as np

    body = v.require_object(await v.read_json(request))
    model = _model(body)
    texts, rows = parse_input(body.get("input"))
    fmt = body.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise bad_request("'encoding_format' must be \"float\" or \"base64\"", "encoding_format")
    dims = _dimensions(body)
    truncate = v.boolean(body, "truncate", True)
    engine = await live_encoder(request, model, EMBEDDING)
    if rows is not None:
        n_vocab = engine.info.get("n_vocab")
        for i, r in enumerate(rows):
            v.token_ids(r, "input" if len(rows) == 1 and _is_ids(body["input"]) else f"input[{i}]", n_vocab)
    vectors, n_tokens = await run_embed(engine, texts, rows, truncate)
    vectors = shorten(vectors, dims, engine.info, engine.model_id)
    data = []
    for i, row in enumerate(np.ascontiguousarray(vectors, dtype=np.float32)):
        if fmt == "base64":
            emb = base64.b64encode(row.astype("<f4").tobytes()).decode("ascii")
        else:
            emb = row
        data.append({"object": "embedding", "index": i, "embedding": emb})
    return json_response({"object": "list", "data": data, "model": engine.model_id,
                          "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}})


def json_response(body: dict) -> web.Response:
    """JSON with float32 arrays written by orjson: each number in float32's shortest digits,
    which read back to the same float32, and 20 times faster than ``json`` over Python floats."""
    return web.Response(body=orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), content_type="application/json")


def _ollama_model(body: dict) -> str:
    from runtime.server.wire.ollama.ollama_schemas import engine_model, model_name

    return engine_model(model_name(body))


async def ollama_embed(request: web.Request) -> web.Response:
    import numpy as np

    t0 = time.perf_counter_ns()
    body = v.require_object(await v.read_json(request))
    model = _ollama_model(body)
    texts, rows = parse_input(body.get("input"))
    if rows is not None:
        raise bad_request("'input' must be a string or a list of strings", "input")
    truncate = v.boolean(body, "truncate", True)
    dims = _dimensions(body)
    keep_alive = parse_keep_alive(body.get("keep_alive"))
    engine = await live_encoder(request, model, EMBEDDING, keep_alive)
    t1 = time.perf_counter_ns()
    vectors, n_tokens = await run_embed(engine, texts, None, truncate)
    vectors = shorten(vectors, dims, engine.info, engine.model_id)
    return json_response({"model": body["model"], "embeddings": np.ascontiguousarray(vectors, dtype=np.float32),
                              "total_duration": time.perf_counter_ns() - t0, "load_duration": t1 - t0,
                              "prompt_eval_count": n_tokens})


async def ollama_embeddings(request: web.Request) -> web.Response:
    """The older endpoint: one ``prompt``, one ``embedding``."""
    import numpy as np

    body = v.require_object(await v.read_json(request))
    model = _ollama_model(body)
    prompt = v.text(body.get("prompt"), "prompt", empty=False) if body.get("prompt") is not None else None
    if prompt is None:
        raise bad_request("'prompt' is required: the text to embed", "prompt")
    engine = await live_encoder(request, model, EMBEDDING, parse_keep_alive(body.get("keep_alive")))
    vectors, _ = await run_embed(engine, [prompt], None, True, param="prompt")
    return json_response({"embedding": np.ascontiguousarray(vectors[0], dtype=np.float32)})


ROUTES = [
    ("POST", "/v1/embeddings", openai_embeddings),
    ("POST", "/api/embed", ollama_embed),
    ("POST", "/api/embeddings", ollama_embeddings),
]
