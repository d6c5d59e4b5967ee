"""OpenAI-compatible endpoints: /v1/chat/completions, /v1/completions, /v1/models."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from aiohttp import web

from runtime.engine.client import EngineError, RequestHandle
from runtime.server import sse
from runtime.server.app_keys import MANAGER
from runtime.server.errors import bad_request
from runtime.server.generation import engine_error, start_generation, usage
from runtime.server.schemas import GenerationRequest, parse_chat, parse_completion
from runtime.store.catalog import load_catalog


async def read_json(request: web.Request) -> object:
    try:
        return await request.json(loads=json.loads)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise bad_request(f"the request body is not valid JSON: {e}") from None


class _Chat:
    prefix, obj, chunk_obj = "chatcmpl", "chat.completion", "chat.completion.chunk"
    text_path = ("choices", 0, "delta", "content")

    @staticmethod
    def full(text: str, finish: str | None) -> dict:
        return {"index": 0, "message": {"role": "assistant", "content": text},
                "logprobs": None, "finish_reason": finish}

    @staticmethod
    def delta(text: str | None, finish: str | None, first: bool = False) -> dict:
        d: dict = {"role": "assistant", "content": ""} if first else ({"content": text} if text else {})
        return {"index": 0, "delta": d, "logprobs": None, "finish_reason": finish}


class _Text:
    prefix, obj, chunk_obj = "cmpl", "text_completion", "text_completion"
    text_path = ("choices", 0, "text")

    @staticmethod
    def full(text: str, finish: str | None) -> dict:
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}

    @staticmethod
    def delta(text: str | None, finish: str | None, first: bool = False) -> dict:
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, parse_chat(await read_json(request)), _Chat)


async def completions(request: web.Request) -> web.StreamResponse:
    req = parse_completion(await read_json(request))
    if req.echo and req.prompt is None:
        raise bad_request("'echo' is supported with a text prompt only", "echo")
    return await _generate(request, req, _Text)


async def _generate(request: web.Request, req: GenerationRequest, fmt) -> web.StreamResponse:
    engine, handle = await start_generation(request, req)
    head = {"id": f"{fmt.prefix}-{uuid.uuid4().hex}", "object": fmt.obj, "created": int(time.time()),
            "model": engine.model_id}
    try:
        if req.stream:
            return await _stream(request, req, handle, head, fmt)
        return await _collect(req, handle, head, fmt)
    finally:
        handle.cancel()  # no-op once finished; frees the request's cells if the client left


async def _collect(req: GenerationRequest, handle: RequestHandle, head: dict, fmt) -> web.Response:
    parts: list[str] = [req.prompt] if req.echo and req.prompt else []
    n, finish, cached = 0, None, 0
    try:
        async for out in handle:
            parts.append(out.text)
            n += out.n_tokens
            finish, cached = out.finish_reason, out.cached_tokens
    except EngineError as e:
        raise engine_error(e) from None
    body = {**head, "choices": [fmt.full("".join(parts), finish)],
            "usage": usage(handle.prompt_tokens, n, cached)}
    return web.json_response(body)


async def _stream(request: web.Request, req: GenerationRequest, handle: RequestHandle, head: dict, fmt):
    chunk_head = {**head, "object": fmt.chunk_obj}
    text_frame = sse.TextFrames({**chunk_head, "choices": [fmt.delta("x", None)]}, fmt.text_path)
    response = await sse.open_stream(request)
    write = response.write
    n, cached = 0, 0
    try:
        if fmt is _Chat:
            await write(sse.frame({**chunk_head, "choices": [fmt.delta(None, None, first=True)]}))
        elif req.echo and req.prompt:
            await write(sse.frame({**chunk_head, "choices": [fmt.delta(req.prompt, None)]}))
        async for out in handle:
            # Outputs that queued up while this task waited go out as one frame.
            text, finish, k, cached = out.text, out.finish_reason, out.n_tokens, out.cached_tokens
            for more in handle.ready():
                text, finish, k = text + more.text, more.finish_reason, k + more.n_tokens
                cached = more.cached_tokens
            n += k
            if finish is not None:
                await write(sse.frame({**chunk_head, "choices": [fmt.delta(text, finish)]}))
            elif text:
                await write(text_frame(text))
        if req.include_usage:
            await write(sse.frame({**chunk_head, "choices": [], "usage": usage(handle.prompt_tokens, n, cached)}))
    except EngineError as e:
        await write(sse.frame(engine_error(e).body()))
    except (ConnectionResetError, asyncio.CancelledError):
        handle.cancel()
        raise
    await write(sse.DONE)
    await response.write_eof()
    return response


async def list_models(request: web.Request) -> web.Response:
    """The embedded models, and the loaded model when it is a local file."""
    data = [{"id": e.id, "object": "model", "created": 0, "owned_by": "hearth", "name": e.name}
            for e in load_catalog().values() if e.embedded is not None]
    engine = request.app[MANAGER].engine
    if engine is not None and all(m["id"] != engine.model_id for m in data):
        data.append({"id": engine.model_id, "object": "model", "created": 0, "owned_by": "local"})
    return web.json_response({"object": "list", "data": data})
