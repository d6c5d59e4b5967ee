"""OpenAI Responses: ``POST /v1/responses``, ``GET`` and ``DELETE /v1/responses/{id}``.

The body becomes a ``GenerationRequest`` (``responses_schemas``) on the generation path every
wire format shares. With ``previous_response_id`` the stored conversation goes in front of the
new input, so the prompt starts with the tokens of the earlier turns and the engine's prefix
cache serves them (``usage.input_tokens_details.cached_tokens``). With ``stream: true`` the
reply is the Responses event sequence, each event named and numbered (``sequence_number``):
``response.created``, ``response.in_progress``, ``response.output_item.added``,
``response.content_part.added``, ``response.output_text.delta`` ... ``.done``,
``response.content_part.done``, ``response.output_item.done`` (function calls, reasoning: see
``responses_output``), then ``response.completed``
(``response.incomplete`` when ``max_output_tokens`` cut it, ``response.failed`` on an engine error).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import replace

from aiohttp import web

from runtime.engine.client import EngineError
from runtime.server import sse
from runtime.server.app_keys import CONFIG
from runtime.server.errors import ApiError
from runtime.server.security import client_id
from runtime.server.media_input import without_media
from runtime.server.generate.error_table import api_error
from runtime.server.generate.generation import start_generation
from runtime.server.generate.logprobs_api import chat_content
from runtime.server.validation import read_parsed
from runtime.server.generate.reply import Reply
from runtime.server.generate.request import Message, ToolCall
from runtime.tool_choice import ToolChoice
from runtime.server.wire.responses.responses_output import OutputItems
from runtime.server.wire.responses.responses_schemas import ResponsesRequest, parse_responses
from runtime.server.wire.responses.responses_store import ResponseStore

RESPONSES = web.AppKey("responses", ResponseStore)


class _Reply:
    """The response object of one request, as it stands."""

    def __init__(self, rreq: ResponsesRequest, model: str) -> None:
        self.rreq, self.model = rreq, model
        self.id = f"resp_{uuid.uuid4().hex}"
        self.created_at = int(time.time())

    def body(self, status: str, reply: Reply | None = None, output: list[dict] | None = None,
             error: dict | None = None) -> dict:
        r = self.rreq
        incomplete = status == "incomplete"
        return {
            "id": self.id, "object": "response", "created_at": self.created_at, "status": status,
            "error": error, "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": r.instructions, "max_output_tokens": r.max_output_tokens, "model": self.model,
            "output": output or [], "parallel_tool_calls": r.gen.parallel_tool_calls,
            "previous_response_id": r.previous_response_id, "reasoning": {"effort": r.reasoning_effort, "summary": None},
            "store": r.store, "temperature": r.gen.params.temperature, "text": {"format": r.text_format},
            "tool_choice": _tool_choice(r.gen.tool_choice), "tools": r.shown_tools,
            "top_p": r.gen.params.top_p, "truncation": "disabled",
            "usage": reply.usage.responses() if reply is not None and output else None, "metadata": r.metadata,
            "user": None,
        }


def _call(item: dict) -> ToolCall:
    """An output item's call, for the stored conversation (arguments that are not a JSON object,
    as a call cut by the token limit leaves them: none)."""
    if item["type"] == "custom_tool_call":
        return ToolCall(item["call_id"], item["name"], {"input": item["input"]})
    try:
        arguments = json.loads(item["arguments"])
    except (ValueError, RecursionError):
        arguments = {}
    return ToolCall(item["call_id"], item["name"], arguments if isinstance(arguments, dict) else {})


def _tool_choice(choice: ToolChoice) -> str | dict:
    if choice.kind == "function":
        return {"type": "function", "name": choice.name}
    return choice.kind


def _status(reply: Reply) -> str:
    choice = reply.choices[0]
    return "incomplete" if choice.engine_finish == "length" and not choice.calls else "completed"


async def _history(request: web.Request, rreq: ResponsesRequest) -> list[Message]:
    if rreq.previous_response_id is None:
        return []
    stored = await asyncio.to_thread(request.app[RESPONSES].get, rreq.previous_response_id)
    if stored is None:
        raise ApiError(404, f"Previous response with id '{rreq.previous_response_id}' not found (it was not stored, "
                            "was deleted, or is past the retention period)", param="previous_response_id",
                       code="previous_response_not_found")
    return stored.conversation


async def create(request: web.Request) -> web.StreamResponse:
    rreq = await read_parsed(request, parse_responses)
    history = await _history(request, rreq)
    system = [Message("system", rreq.instructions)] if rreq.instructions else []
    rreq.gen.messages = system + history + rreq.input_messages
    gen = await start_generation(request, rreq.gen)
    reply, shown = gen.reply(), _Reply(rreq, rreq.gen.model or gen.engine.model_id)
    try:
        if rreq.gen.stream:
            return await _stream(request, reply, shown, history)
        items = _Items(rreq)
        try:
            async for ch in reply.chunks():
                await items.add(ch)
        except EngineError as e:
            raise api_error(e) from None
        status = _status(reply)
        body = shown.body(status, reply, await items.output.finish(status))
        await _keep(request, rreq, body, history, items.output)
        return web.json_response(body)
    finally:
        reply.cancel()  # no-op once finished; frees the request's cells if the client left


class _Items:
    """The output items, fed chunk by chunk: each text delta takes the logprobs of the tokens read
    since the last one (asked for with ``include: ["message.output_text.logprobs"]``)."""

    def __init__(self, rreq: ResponsesRequest, emit=None) -> None:
        self.pending: list = []
        logprobs = self._take if rreq.gen.params.logprobs else (lambda: [])
        self.output = (OutputItems(tool_kinds=rreq.tool_kinds, logprobs=logprobs) if emit is None
                       else OutputItems(emit, rreq.tool_kinds, logprobs))

    def _take(self) -> list[dict]:
        taken, self.pending = self.pending, []
        return chat_content(taken)

    async def add(self, ch) -> None:
        self.pending += ch.logprobs
        for e in ch.events:
            await self.output.add(e)


async def _keep(request: web.Request, rreq: ResponsesRequest, body: dict, history: list[Message],
                items: OutputItems) -> None:
    if rreq.store:
        turn = Message("assistant", items.text("message"), tool_calls=[_call(c) for c in items.calls])
        conversation = history + _without_media(rreq.input_messages) + [turn]
        await asyncio.to_thread(request.app[RESPONSES].put, body["id"], body, conversation, client_id(request))


def _without_media(messages: list[Message]) -> list[Message]:
    """A stored turn keeps no media bytes: a later turn reads a note where an image was."""
    texts = without_media([{"content": m.content} for m in messages])
    return [replace(m, content=t["content"]) for m, t in zip(messages, texts)]


async def _stream(request: web.Request, reply: Reply, shown: _Reply, history: list[Message]) -> web.StreamResponse:
    seq = 0

    def event(kind: str, **fields) -> bytes:
        nonlocal seq
        seq += 1
        return sse.frame({"type": kind, "sequence_number": seq - 1, **fields}, kind)

    # while the prompt is read, the keep-alive is the in-progress event again: Codex drops a
    # stream after 300 s without an event, and SSE comments are not events to it
    response = await sse.open_stream(request, lambda: event("response.in_progress",
                                                            response=shown.body("in_progress")))

    async def emit(kind: str, **fields) -> None:
        await response.write(event(kind, **fields))

    items = _Items(shown.rreq, emit)
    try:
        await emit("response.created", response=shown.body("in_progress"))
        await emit("response.in_progress", response=shown.body("in_progress"))
        if reply.plan is None:  # plain text: the one message opens at once
            await items.output.open_message()
        async for ch in reply.chunks():
            await items.add(ch)
        status = _status(reply)
        body = shown.body(status, reply, await items.output.finish(status))
        await _keep(request, shown.rreq, body, history, items.output)
        await emit("response.completed" if status == "completed" else "response.incomplete", response=body)
    except EngineError as e:
        err = api_error(e)
        await emit("response.failed", response=shown.body("failed", error={"code": err.code or "server_error",
                                                                             "message": err.message}))
    except (ConnectionResetError, asyncio.CancelledError):
        reply.cancel()
        raise
    await response.write_eof()
    return response


def _not_found(rid: str) -> ApiError:
    return ApiError(404, f"Response with id '{rid}' not found", param="response_id", code="response_not_found")


async def get(request: web.Request) -> web.Response:
    rid = request.match_info["id"]
    stored = await asyncio.to_thread(request.app[RESPONSES].get, rid)
    if stored is None:
        raise _not_found(rid)
    return web.json_response(stored.response)


async def delete(request: web.Request) -> web.Response:
    rid = request.match_info["id"]
    if not await asyncio.to_thread(request.app[RESPONSES].delete, rid):
        raise _not_found(rid)
    return web.json_response({"id": rid, "object": "response", "deleted": True})


def store_for(app: web.Application) -> ResponseStore:
    return ResponseStore(app[CONFIG].data_dir / "responses")


ROUTES = [
    ("POST", "/v1/responses", create),
    ("GET", "/v1/responses/{id}", get),
    ("DELETE", "/v1/responses/{id}", delete),
]
