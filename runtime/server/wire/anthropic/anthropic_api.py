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
import functools
import json
import uuid

from aiohttp import web

from runtime.engine.client import EngineError
from runtime.server import sse
from runtime.server.wire.anthropic.anthropic_schemas import parse_messages
from runtime.server.generate.error_table import api_error
from runtime.server.generate.generation import count_prompt_tokens, start_generation
from runtime.server.validation import read_parsed
from runtime.chat.events import ReasoningDelta, TextDelta, ToolCallArgsDelta, ToolCallEnd, ToolCallStart
from runtime.server.generate.reply import Choice, Reply


def stop_reason(choice: Choice, stop_sequences: list[str]) -> tuple[str, str | None]:
    """Anthropic's ``stop_reason`` and ``stop_sequence`` for a finished reply."""
    if choice.calls:
        return "tool_use", None
    if choice.engine_finish == "length":
        return "max_tokens", None
    if choice.stop_sequence is not None and choice.stop_sequence in stop_sequences:
        return "stop_sequence", choice.stop_sequence
    return "end_turn", None  # the end-of-turn token, or a stop string of the model's own template


def _message(msg_id: str, model: str, content: list[dict], reason: str | None, seq: str | None, use: dict) -> dict:
    return {"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": reason, "stop_sequence": seq, "usage": use}


async def messages(request: web.Request) -> web.StreamResponse:
    mreq = await read_parsed(request, parse_messages)
    gen = await start_generation(request, mreq.gen)
    reply = gen.reply()
    msg_id = f"msg_{uuid.uuid4().hex}"
    model = mreq.gen.model or gen.engine.model_id
    try:
        if mreq.gen.stream:
            return await _stream(request, reply, msg_id, model, mreq.stop_sequences)
        choice = (await reply.collect())[0]
        reason, seq = stop_reason(choice, mreq.stop_sequences)
        return web.json_response(_message(msg_id, model, _content(choice), reason, seq, reply.usage.anthropic()))
    finally:
        reply.cancel()  # no-op once finished; frees the request's cells if the client left


def _content(choice: Choice) -> list[dict]:
    """A whole reply's content blocks: thinking, text, then the tool_use blocks."""
    blocks: list[dict] = []
    if choice.reasoning:
        blocks.append({"type": "thinking", "thinking": choice.reasoning, "signature": ""})
    if choice.text:
        blocks.append({"type": "text", "text": choice.text})
    blocks += [{"type": "tool_use", "id": tool_use_id(c["id"]), "name": c["name"], "input": json.loads(c["arguments"])}
               for c in choice.calls]
    return blocks


def tool_use_id(call_id: str) -> str:
    """Anthropic's ``toolu_`` ids for the parser's ``call_`` ids."""
    return "toolu_" + call_id.removeprefix("call_")


class _Blocks:
    """Streamed content blocks: each event opens the block it belongs to (closing the one
    before) and adds its delta; blocks are numbered from 0 in the order they open."""

    def __init__(self, write) -> None:
        self.write, self.index = write, -1
        self.kind: str | None = None
        self.text: sse.TextFrames | None = None

    async def open(self, kind: str, block: dict) -> None:
        await self.close()
        self.index, self.kind = self.index + 1, kind
        if kind == "text":  # one frame per token: its JSON around the text is encoded once
            self.text = sse.TextFrames({"type": "content_block_delta", "index": self.index,
                                        "delta": {"type": "text_delta", "text": ""}}, ("delta", "text"),
                                       event="content_block_delta")
        await self.write(sse.frame({"type": "content_block_start", "index": self.index, "content_block": block},
                                   "content_block_start"))

    async def close(self) -> None:
        if self.kind is not None:
            await self.write(sse.frame({"type": "content_block_stop", "index": self.index}, "content_block_stop"))
            self.kind = None

    async def delta(self, delta: dict) -> None:
        await self.write(sse.frame({"type": "content_block_delta", "index": self.index, "delta": delta},
                                   "content_block_delta"))

    async def add(self, e) -> None:
        if isinstance(e, TextDelta) and e.text:
            if self.kind != "text":
                await self.open("text", {"type": "text", "text": ""})
            assert self.text is not None  # open("text") made its frames
            await self.write(self.text(e.text))
        elif isinstance(e, ReasoningDelta) and e.text:
            if self.kind != "thinking":
                await self.open("thinking", {"type": "thinking", "thinking": "", "signature": ""})
            await self.delta({"type": "thinking_delta", "thinking": e.text})
        elif isinstance(e, ToolCallStart):
            await self.open("tool_use", {"type": "tool_use", "id": tool_use_id(e.id), "name": e.name, "input": {}})
        elif isinstance(e, ToolCallArgsDelta):
            await self.delta({"type": "input_json_delta", "partial_json": e.fragment})
        elif isinstance(e, ToolCallEnd):
            await self.close()


async def _stream(request: web.Request, reply: Reply, msg_id: str, model: str, stops: list[str]) -> web.StreamResponse:
    response = await sse.open_stream(request, sse.frame({"type": "ping"}, "ping"))
    write = response.write
    start = {"input_tokens": reply.prompt_tokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
             "output_tokens": 0}
    blocks = _Blocks(write)
    try:
        await write(sse.frame({"type": "message_start", "message": _message(msg_id, model, [], None, None, start)},
                              "message_start"))
        if reply.plan is None:  # plain text: the one text block opens at once, as Anthropic's does
            await blocks.open("text", {"type": "text", "text": ""})
        await write(sse.frame({"type": "ping"}, "ping"))
        async for ch in reply.chunks():
            for e in ch.events:
                await blocks.add(e)
        await blocks.close()
        reason, seq = stop_reason(reply.choices[0], stops)
        await write(sse.frame({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": seq},
                               "usage": reply.usage.anthropic()}, "message_delta"))
        await write(sse.frame({"type": "message_stop"}, "message_stop"))
    except EngineError as e:
        await write(sse.frame(api_error(e).anthropic_body(), "error"))
    except (ConnectionResetError, asyncio.CancelledError):
        reply.cancel()
        raise
    await response.write_eof()
    return response


async def count_tokens(request: web.Request) -> web.Response:
    mreq = await read_parsed(request, functools.partial(parse_messages, count_only=True))
    return web.json_response({"input_tokens": (await count_prompt_tokens(request, mreq.gen)).tokens})


ROUTES = [
    ("POST", "/v1/messages", messages),
    ("POST", "/v1/messages/count_tokens", count_tokens),
]
