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
import time
import uuid

from aiohttp import web

from runtime.engine.client import EngineError
from runtime.server import sse
from runtime.server.app_keys import CONFIG
from runtime.server.errors import ApiError
from runtime.server.generation import Run, engine_error, start_generation
from runtime.server.openai_api import read_json
from runtime.server.reply_events import apply_options, events
from runtime.server.responses_output import OutputItems
from runtime.server.responses_schemas import ResponsesRequest, parse_responses
from runtime.server.responses_store import ResponseStore

RESPONSES = web.AppKey("responses", ResponseStore)


class _Reply:
    """The response object of one request, as it stands."""

    def __init__(self, rreq: ResponsesRequest, model: str) -> None:
        self.rreq, self.model = rreq, model
        self.id = f"resp_{uuid.uuid4().hex}"
        self.created_at = int(time.time())

    def body(self, status: str, run: Run | None = None, output: list[dict] | None = None,
             error: dict | None = None) -> dict:
        r = self.rreq
        incomplete = status == "incomplete"
        return {
            "id": self.id, "object": "response", "created_at": self.created_at, "status": status,
            "error": error, "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "instructions": r.instructions, "max_output_tokens": r.max_output_tokens, "model": self.model,
            "output": output or [], "parallel_tool_calls": r.parallel_tool_calls,
            "previous_response_id": r.previous_response_id, "reasoning": {"effort": r.reasoning_effort, "summary": None},
            "store": r.store, "temperature": r.gen.params.temperature, "text": {"format": r.text_format},
            "tool_choice": _tool_choice(r.tool_choice), "tools": [_tool(t) for t in r.tools],
            "top_p": r.gen.params.top_p, "truncation": "disabled",
            "usage": usage(run, output) if run is not None and output else None, "metadata": r.metadata, "user": None,
        }


def _tool(t: dict) -> dict:
    fn = t["function"]
    return {"type": "function", "name": fn["name"], "description": fn.get("description"),
            "parameters": fn.get("parameters"), "strict": fn.get("strict")}


def _tool_choice(choice) -> str | dict:
    if isinstance(choice, dict):
        return {"type": "function", "name": choice["function"]["name"]}
    return choice or "auto"


def usage(run: Run, output: list[dict]) -> dict:
    reasoning = sum(len(p["text"]) for i in output if i["type"] == "reasoning" for p in i["content"])
    total = reasoning + sum(len(p.get("text", "")) for i in output if i["type"] == "message" for p in i["content"])
    # the engine counts tokens per step, not per channel: reasoning's share by characters
    thought = round(run.completion_tokens * reasoning / total) if reasoning else 0
    return {"input_tokens": run.prompt_tokens,
            "input_tokens_details": {"cached_tokens": min(run.cached_tokens, run.prompt_tokens), "cache_write_tokens": 0},
            "output_tokens": run.completion_tokens, "output_tokens_details": {"reasoning_tokens": thought},
            "total_tokens": run.prompt_tokens + run.completion_tokens}


def _status(run: Run) -> str:
    return "incomplete" if run.finish == "length" and not run.calls else "completed"


async def _history(request: web.Request, rreq: ResponsesRequest) -> list[dict]:
    if rreq.previous_response_id is None:
        return []
    stored = await asyncio.to_thread(request.app[RESPONSES].get, rreq.previous_response_id)
    if stored is None:
        raise ApiError(404, f"Previous response with id '{rreq.previous_response_id}' not found (it was not stored, "
                            "was deleted, or is past the retention period)", param="previous_response_id",
                       code="previous_response_not_found")
    return stored.conversation


async def create(request: web.Request) -> web.StreamResponse:
    rreq = parse_responses(await read_json(request))
    history = await _history(request, rreq)
    system = [{"role": "system", "content": rreq.instructions}] if rreq.instructions else []
    rreq.gen.messages = system + history + rreq.input_messages
    apply_options(rreq.gen, tools=rreq.tools, tool_choice=rreq.tool_choice, parallel=rreq.parallel_tool_calls,
                  think=None, effort=rreq.reasoning_effort, response_format=rreq.response_format,
                  extensions=rreq.extensions)
    engine, handles = await start_generation(request, rreq.gen)
    run, reply = Run(handles[0]), _Reply(rreq, rreq.gen.model or engine.model_id)
    plan = rreq.gen.extra.get("output")
    try:
        if rreq.gen.stream:
            return await _stream(request, run, plan, reply, history)
        items = OutputItems()
        try:
            async for e in events(run, plan):
                await items.add(e)
        except EngineError as e:
            raise engine_error(e) from None
        body = reply.body(_status(run), run, await items.finish(_status(run)))
        await _keep(request, rreq, body, history, items)
        return web.json_response(body)
    finally:
        run.handle.cancel()  # no-op once finished; frees the request's blocks if the client left


async def _keep(request: web.Request, rreq: ResponsesRequest, body: dict, history: list[dict],
                items: OutputItems) -> None:
    if rreq.store:
        turn: dict = {"role": "assistant", "content": items.text("message")}
        if items.calls:
            turn["tool_calls"] = [{"id": c["call_id"], "type": "function",
                                   "function": {"name": c["name"], "arguments": c["arguments"]}} for c in items.calls]
        conversation = history + rreq.input_messages + [turn]
        await asyncio.to_thread(request.app[RESPONSES].put, body["id"], body, conversation)


async def _stream(request: web.Request, run: Run, plan, reply: _Reply, history: list[dict]) -> web.StreamResponse:
    response = await sse.open_stream(request)
    seq = 0

    async def emit(kind: str, **fields) -> None:
        nonlocal seq
        await response.write(sse.frame({"type": kind, "sequence_number": seq, **fields}, kind))
        seq += 1

    items = OutputItems(emit)
    try:
        await emit("response.created", response=reply.body("in_progress"))
        await emit("response.in_progress", response=reply.body("in_progress"))
        if plan is None:  # plain text: the one message opens at once
            await items.open_message()
        async for e in events(run, plan):
            await items.add(e)
        status = _status(run)
        body = reply.body(status, run, await items.finish(status))
        await _keep(request, reply.rreq, body, history, items)
        await emit("response.completed" if status == "completed" else "response.incomplete", response=body)
    except EngineError as e:
        err = engine_error(e)
        await emit("response.failed", response=reply.body("failed", error={"code": err.code or "server_error",
                                                                             "message": err.message}))
    except (ConnectionResetError, asyncio.CancelledError):
        run.handle.cancel()
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
