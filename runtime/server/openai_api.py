"""OpenAI-compatible endpoints: /v1/chat/completions, /v1/completions, /v1/models."""

from __future__ import annotations

import asyncio
import json
import time
import uuid

from aiohttp import web

from runtime.engine.client import EngineError, RequestHandle
from runtime.server import chat_output, sse
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
    def full(index: int, text: str, finish: str | None) -> dict:
        return {"index": index, "message": {"role": "assistant", "content": text},
                "logprobs": None, "finish_reason": finish}

    @staticmethod
    def delta(index: int, text: str | None, finish: str | None, first: bool = False) -> dict:
        d: dict = {"role": "assistant", "content": ""} if first else ({"content": text} if text else {})
        return {"index": index, "delta": d, "logprobs": None, "finish_reason": finish}


class _Text:
    prefix, obj, chunk_obj = "cmpl", "text_completion", "text_completion"
    text_path = ("choices", 0, "text")

    @staticmethod
    def full(index: int, text: str, finish: str | None) -> dict:
        return {"index": index, "text": text, "logprobs": None, "finish_reason": finish}

    @staticmethod
    def delta(index: int, text: str | None, finish: str | None, first: bool = False) -> dict:
        return {"index": index, "text": text or "", "logprobs": None, "finish_reason": finish}


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, parse_chat(await read_json(request)), _Chat)


async def completions(request: web.Request) -> web.StreamResponse:
    req = parse_completion(await read_json(request))
    if req.echo and req.prompt is None:
        raise bad_request("'echo' is supported with a text prompt only", "echo")
    return await _generate(request, req, _Text)


async def _generate(request: web.Request, req: GenerationRequest, fmt) -> web.StreamResponse:
    engine, handles = await start_generation(request, req)
    head = {"id": f"{fmt.prefix}-{uuid.uuid4().hex}", "object": fmt.obj, "created": int(time.time()),
            "model": engine.model_id}
    plan = req.extra.get("output")
    try:
        if plan is not None and fmt is _Chat:  # tool calls or reasoning: parsed replies
            if req.stream:
                return await chat_output.openai_stream(request, req, handles, head, plan)
            return await chat_output.openai_collect(req, handles, head, plan)
        if req.stream:
            return await _stream(request, req, handles, head, fmt)
        return await _collect(req, handles, head, fmt)
    finally:
        for handle in handles:
            handle.cancel()  # no-op once finished; frees the request's blocks if the client left


async def _collect(req: GenerationRequest, handles: list[RequestHandle], head: dict, fmt) -> web.Response:
    async def one(handle: RequestHandle) -> tuple[str, str | None, int, int]:
        parts: list[str] = [req.prompt] if req.echo and req.prompt else []
        n, finish, cached = 0, None, None
        async for out in handle:
            parts.append(out.text)
            n += out.n_tokens
            finish, cached = out.finish_reason, out
        return "".join(parts), finish, n, cached

    try:
        results = await asyncio.gather(*[one(h) for h in handles])
    except EngineError as e:
        raise engine_error(e) from None
    choices = [fmt.full(i, text, finish) for i, (text, finish, _, _) in enumerate(results)]
    total = sum(r[2] for r in results)
    body = {**head, "choices": choices, "usage": usage(handles[0].prompt_tokens, total, results[0][3])}
    return web.json_response(body)


async def _merged(handles: list[RequestHandle]):
    """(choice index, outputs) as they come; outputs that queued up arrive together."""
    if len(handles) == 1:
        async for out in handles[0]:
            yield 0, [out, *handles[0].ready()]
        return
    queue: asyncio.Queue = asyncio.Queue()

    async def pump(i: int, handle: RequestHandle) -> None:
        try:
            async for out in handle:
                queue.put_nowait((i, [out, *handle.ready()]))
        except EngineError as e:
            queue.put_nowait((i, e))
        queue.put_nowait((i, None))

    tasks = [asyncio.create_task(pump(i, h)) for i, h in enumerate(handles)]
    try:
        open_ = len(handles)
        while open_:
            i, item = await queue.get()
            if item is None:
                open_ -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield i, item
    finally:
        for t in tasks:
            t.cancel()


async def _stream(request: web.Request, req: GenerationRequest, handles: list[RequestHandle], head: dict, fmt):
    chunk_head = {**head, "object": fmt.chunk_obj}
    frames = [sse.TextFrames({**chunk_head, "choices": [fmt.delta(i, "x", None)]}, fmt.text_path)
              for i in range(len(handles))]
    response = await sse.open_stream(request)
    write = response.write
    n, cached = 0, None
    try:
        for i in range(len(handles)):
            if fmt is _Chat:
                await write(sse.frame({**chunk_head, "choices": [fmt.delta(i, None, None, first=True)]}))
            elif req.echo and req.prompt:
                await write(sse.frame({**chunk_head, "choices": [fmt.delta(i, req.prompt, None)]}))
        async for i, outs in _merged(handles):
            text = "".join(o.text for o in outs)
            finish = outs[-1].finish_reason
            n += sum(o.n_tokens for o in outs)
            if i == 0:
                cached = outs[-1]
            if finish is not None:
                await write(sse.frame({**chunk_head, "choices": [fmt.delta(i, text, finish)]}))
            elif text:
                await write(frames[i](text))
        if req.include_usage:
            await write(sse.frame({**chunk_head, "choices": [],
                                   "usage": usage(handles[0].prompt_tokens, n, cached)}))
    except EngineError as e:
        await write(sse.frame(engine_error(e).body()))
    except (ConnectionResetError, asyncio.CancelledError):
        for handle in handles:
            handle.cancel()
        raise
    await write(sse.DONE)
    await response.write_eof()
    return response


def _add_capabilities(data: list[dict], data_dir) -> None:
    """Tools and reasoning support per model, read from each GGUF's chat template."""
    from runtime.server.ollama_models import header, local_models
    from runtime.server.tool_formats import template_capabilities

    paths = {m.id: m.path for m in local_models(data_dir)}
    for d in data:
        path = paths.get(d["id"])
        try:
            template = header(path).metadata.get("tokenizer.chat_template") if path is not None and path.is_file() else None
        except ValueError:  # an unreadable file: no capabilities to report
            template = None
        d["capabilities"] = template_capabilities(template if isinstance(template, str) else None)


async def list_models(request: web.Request) -> web.Response:
    """The local models: embedded, downloaded, imported, and the loaded model when it is a file."""
    from runtime.server.app_keys import CONFIG
    from runtime.store.registry import Registry

    data = [{"id": e.id, "object": "model", "created": 0, "owned_by": "hearth", "name": e.name}
            for e in load_catalog().values() if e.embedded is not None]
    local = await asyncio.to_thread(Registry(request.app[CONFIG].data_dir).models)
    data += [{"id": m.id, "object": "model", "created": 0, "owned_by": m.source, "name": m.name}
             for m in local if all(d["id"] != m.id for d in data)]
    await asyncio.to_thread(_add_capabilities, data, request.app[CONFIG].data_dir)
    engine = request.app[MANAGER].engine
    if engine is not None and all(m["id"] != engine.model_id for m in data):
        from runtime.server.tool_formats import template_capabilities

        template = (engine.loaded.info or {}).get("chat_template") if engine.loaded else None
        data.append({"id": engine.model_id, "object": "model", "created": 0, "owned_by": "local",
                     "capabilities": template_capabilities(template)})
    return web.json_response({"object": "list", "data": data})
