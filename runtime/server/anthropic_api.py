"""Anthropic Messages: ``POST /v1/messages`` and ``POST /v1/messages/count_tokens``.

The body becomes a ``GenerationRequest`` (``anthropic_schemas``) and goes through the same
generation path as every wire format (``generation.start_generation``). The reply is a
``message`` object, or with ``stream: true`` Anthropic's named SSE events: ``message_start``,
``content_block_start``, ``ping``, ``content_block_delta`` (``text_delta``),
``content_block_stop``, ``message_delta`` (stop reason, final usage), ``message_stop``; an
engine failure mid-stream is an ``error`` event. ``usage.cache_read_input_tokens`` is the
prompt prefix the engine reused from its cache, and ``input_tokens`` the rest, as Anthropic
counts them. Errors on these routes are in Anthropic's shape (``errors.py``).
"""

from __future__ import annotations

import asyncio
import uuid

from aiohttp import web

from runtime.engine.client import EngineError
from runtime.server import sse
from runtime.server.anthropic_schemas import TOOLS_NOT_YET, MessagesRequest, parse_messages
from runtime.server.errors import ApiError
from runtime.server.generation import Run, count_prompt_tokens, engine_error, start_generation
from runtime.server.openai_api import read_json


def refuse_not_yet(mreq: MessagesRequest) -> None:
    if mreq.uses_tools:
        raise ApiError(400, f"tools: {TOOLS_NOT_YET}; send text messages only", param="tools",
                       code="tools_not_supported")
    if mreq.response_format is not None:
        raise ApiError(400, "output_config.format: structured output is not supported by this server yet",
                       param="output_config.format", code="structured_output_not_supported")


def stop_reason(run: Run, stop_sequences: list[str]) -> tuple[str, str | None]:
    """Anthropic's ``stop_reason`` and ``stop_sequence`` for a finished run."""
    if run.finish == "length":
        return "max_tokens", None
    if run.stop_sequence is not None and run.stop_sequence in stop_sequences:
        return "stop_sequence", run.stop_sequence
    return "end_turn", None  # the end-of-turn token, or a stop string of the model's own template


def usage(run: Run) -> dict:
    cached = min(run.cached_tokens, run.prompt_tokens)
    return {"input_tokens": run.prompt_tokens - cached, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached, "output_tokens": run.completion_tokens}


def _message(msg_id: str, model: str, content: list[dict], reason: str | None, seq: str | None, use: dict) -> dict:
    return {"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": reason, "stop_sequence": seq, "usage": use}


async def messages(request: web.Request) -> web.StreamResponse:
    mreq = parse_messages(await read_json(request))
    refuse_not_yet(mreq)
    engine, handles = await start_generation(request, mreq.gen)
    run = Run(handles[0])
    msg_id = f"msg_{uuid.uuid4().hex}"
    model = mreq.gen.model or engine.model_id
    try:
        if mreq.gen.stream:
            return await _stream(request, run, msg_id, model, mreq.stop_sequences)
        text = await run.collect()
        reason, seq = stop_reason(run, mreq.stop_sequences)
        content = [{"type": "text", "text": text}] if text else []
        return web.json_response(_message(msg_id, model, content, reason, seq, usage(run)))
    finally:
        run.handle.cancel()  # no-op once finished; frees the request's blocks if the client left


async def _stream(request: web.Request, run: Run, msg_id: str, model: str, stops: list[str]) -> web.StreamResponse:
    response = await sse.open_stream(request)
    write = response.write
    start = {"input_tokens": run.prompt_tokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
             "output_tokens": 0}
    delta = sse.TextFrames({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ""}},
                           ("delta", "text"), event="content_block_delta")
    try:
        await write(sse.frame({"type": "message_start", "message": _message(msg_id, model, [], None, None, start)},
                              "message_start"))
        await write(sse.frame({"type": "content_block_start", "index": 0,
                               "content_block": {"type": "text", "text": ""}}, "content_block_start"))
        await write(sse.frame({"type": "ping"}, "ping"))
        async for text in run.pieces():
            await write(delta(text))
        await write(sse.frame({"type": "content_block_stop", "index": 0}, "content_block_stop"))
        reason, seq = stop_reason(run, stops)
        await write(sse.frame({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": seq},
                               "usage": usage(run)}, "message_delta"))
        await write(sse.frame({"type": "message_stop"}, "message_stop"))
    except EngineError as e:
        await write(sse.frame(engine_error(e).anthropic_body(), "error"))
    except (ConnectionResetError, asyncio.CancelledError):
        run.handle.cancel()
        raise
    await response.write_eof()
    return response


async def count_tokens(request: web.Request) -> web.Response:
    mreq = parse_messages(await read_json(request), count_only=True)
    refuse_not_yet(mreq)
    return web.json_response({"input_tokens": await count_prompt_tokens(request, mreq.gen)})


ROUTES = [
    ("POST", "/v1/messages", messages),
    ("POST", "/v1/messages/count_tokens", count_tokens),
]
