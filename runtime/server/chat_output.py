"""Chat replies with tool calls or reasoning, on the OpenAI and Ollama wire formats.

The engine's text goes through :class:`~runtime.server.output_events.OutputParser`; each wire
format maps its events:

- OpenAI: ``TextDelta`` -> ``delta.content``, ``ReasoningDelta`` -> ``delta.reasoning_content``,
  ``ToolCallStart`` -> ``delta.tool_calls[{index, id, type, function: {name, arguments: ""}}]``,
  ``ToolCallArgsDelta`` -> ``delta.tool_calls[{index, function: {arguments}}]``; the last chunk's
  ``finish_reason`` is ``tool_calls`` when the reply made calls. Whole replies carry
  ``message.content`` (None when only calls), ``message.reasoning_content`` and
  ``message.tool_calls``.
- Ollama: ``message.content``, ``message.thinking`` and ``message.tool_calls`` (arguments as
  objects); a streamed call is one line of its own when it is complete.

Reasoning tokens are output tokens: they count in ``completion_tokens`` / ``eval_count`` like
the answer's (``usage.completion_tokens_details.reasoning_tokens`` approximates their share
by characters, as the engine reports tokens per step, not per channel).
"""

from __future__ import annotations

import asyncio
import json
import time

from aiohttp import web

from runtime.engine.client import EngineError, RequestHandle
from runtime.server import sse
from runtime.server.generation import engine_error, usage
from runtime.server.output_events import (
    OutputParser, ReasoningDelta, TextDelta, ToolCallArgsDelta, ToolCallEnd, ToolCallStart,
)
from runtime.server.tool_calls import OutputPlan, call_checker


def parser_for(plan: OutputPlan) -> OutputParser:
    return OutputParser(plan.fmt, plan.think, plan.in_reasoning,
                        call_checker(plan.tools) if plan.fmt is not None else None)


def _message(text: str, reasoning: str, calls: list[dict]) -> dict:
    msg: dict = {"role": "assistant", "content": text if (text or not calls) else None, "refusal": None}
    if reasoning:
        msg["reasoning_content"] = reasoning
    if calls:
        msg["tool_calls"] = [{"id": c["id"], "type": "function",
                              "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]
    return msg


def _usage(prompt: int, n: int, last, text: str, reasoning: str) -> dict:
    body = usage(prompt, n, last)
    if reasoning:
        share = len(reasoning) / max(1, len(reasoning) + len(text))
        body["completion_tokens_details"] = {"reasoning_tokens": round(n * share)}
    return body


def _events_text(events) -> tuple[str, str]:
    return ("".join(e.text for e in events if isinstance(e, TextDelta)),
            "".join(e.text for e in events if isinstance(e, ReasoningDelta)))


async def openai_collect(req, handles: list[RequestHandle], head: dict, plan: OutputPlan) -> web.Response:
    async def one(handle: RequestHandle):
        p = parser_for(plan)
        events, n, finish, last = [], 0, None, None
        async for out in handle:
            events += p.feed(out.text)
            n += out.n_tokens
            finish, last = out.finish_reason, out
        events += p.finish()
        text, reasoning = _events_text(events)
        return text, reasoning, p.calls, finish, n, last

    try:
        results = await asyncio.gather(*[one(h) for h in handles])
    except EngineError as e:
        raise engine_error(e) from None
    choices = [{"index": i, "message": _message(t, r, calls), "logprobs": None,
                "finish_reason": "tool_calls" if calls else finish}
               for i, (t, r, calls, finish, _, _) in enumerate(results)]
    total = sum(r[4] for r in results)
    t0, r0 = results[0][0], results[0][1]
    return web.json_response({**head, "choices": choices,
                              "usage": _usage(handles[0].prompt_tokens, total, results[0][5], t0, r0)})


def _delta(event) -> dict | None:
    if isinstance(event, TextDelta):
        return {"content": event.text} if event.text else None
    if isinstance(event, ReasoningDelta):
        return {"reasoning_content": event.text} if event.text else None
    if isinstance(event, ToolCallStart):
        return {"tool_calls": [{"index": event.index, "id": event.id, "type": "function",
                                "function": {"name": event.name, "arguments": ""}}]}
    if isinstance(event, ToolCallArgsDelta):
        return {"tool_calls": [{"index": event.index, "function": {"arguments": event.fragment}}]}
    return None


async def openai_stream(request: web.Request, req, handles: list[RequestHandle], head: dict,
                        plan: OutputPlan) -> web.StreamResponse:
    """One choice per handle, streamed one after another (``n`` > 1 with tools is rare)."""
    chunk_head = {**head, "object": "chat.completion.chunk"}
    response = await sse.open_stream(request)

    def chunk(i: int, delta: dict, finish: str | None = None) -> bytes:
        return sse.frame({**chunk_head, "choices": [{"index": i, "delta": delta, "logprobs": None,
                                                     "finish_reason": finish}]})

    total, last, text_all, reasoning_all = 0, None, "", ""
    try:
        for i, handle in enumerate(handles):
            p = parser_for(plan)
            await response.write(chunk(i, {"role": "assistant", "content": ""}))
            finish = None
            async for out in handle:
                outs = [out, *handle.ready()]
                total += sum(o.n_tokens for o in outs)
                finish = outs[-1].finish_reason
                if i == 0:
                    last = outs[-1]
                events = p.feed("".join(o.text for o in outs))
                if finish is not None:
                    events += p.finish()
                t, r = _events_text(events)
                text_all, reasoning_all = text_all + t, reasoning_all + r
                for e in events:
                    d = _delta(e)
                    if d is not None:
                        await response.write(chunk(i, d))
            await response.write(chunk(i, {}, "tool_calls" if p.calls else finish))
        if req.include_usage:
            await response.write(sse.frame({**chunk_head, "choices": [],
                                            "usage": _usage(handles[0].prompt_tokens, total, last, text_all,
                                                            reasoning_all)}))
    except EngineError as e:
        await response.write(sse.frame(engine_error(e).body()))
    except (ConnectionResetError, asyncio.CancelledError):
        for handle in handles:
            handle.cancel()
        raise
    await response.write(sse.DONE)
    await response.write_eof()
    return response


def _ollama_calls(calls: list[dict]) -> list[dict]:
    return [{"function": {"name": c["name"], "arguments": json.loads(c["arguments"])}} for c in calls]


def _ollama_message(text: str, reasoning: str, calls: list[dict]) -> dict:
    msg: dict = {"role": "assistant", "content": text}
    if reasoning:
        msg["thinking"] = reasoning
    if calls:
        msg["tool_calls"] = _ollama_calls(calls)
    return msg


async def ollama_collect(handle: RequestHandle, head: dict, plan: OutputPlan, timing, final) -> web.Response:
    p = parser_for(plan)
    events, n, finish = [], 0, None
    try:
        async for out in handle:
            if not timing.first:
                timing.first = time.perf_counter_ns()
            events += p.feed(out.text)
            n += out.n_tokens
            finish = out.finish_reason
    except EngineError as e:
        raise engine_error(e) from None
    events += p.finish()
    text, reasoning = _events_text(events)
    body = final(head, text, finish, timing.stats(handle.prompt_tokens, n))
    body["message"] = _ollama_message(text, reasoning, p.calls)
    return web.json_response(body)


async def ollama_stream(request: web.Request, handle: RequestHandle, head: dict, plan: OutputPlan,
                        timing, final, line, now_iso) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    p = parser_for(plan)
    n, finish, done_calls = 0, None, 0
    try:
        async for out in handle:
            outs = [out, *handle.ready()]
            if not timing.first:
                timing.first = time.perf_counter_ns()
            n += sum(o.n_tokens for o in outs)
            finish = outs[-1].finish_reason
            events = p.feed("".join(o.text for o in outs))
            if finish is not None:
                events += p.finish()
            for e in events:
                msg = None
                if isinstance(e, TextDelta) and e.text:
                    msg = {"role": "assistant", "content": e.text}
                elif isinstance(e, ReasoningDelta) and e.text:
                    msg = {"role": "assistant", "content": "", "thinking": e.text}
                elif isinstance(e, ToolCallEnd):
                    msg = {"role": "assistant", "content": "", "tool_calls": _ollama_calls(p.calls[done_calls:e.index + 1])}
                    done_calls = e.index + 1
                if msg is not None:
                    await response.write(line({**head, "created_at": now_iso(), "message": msg, "done": False}))
        body = final(head, "", finish, timing.stats(handle.prompt_tokens, n))
        await response.write(line(body))
    except EngineError as e:
        await response.write(line(engine_error(e).ollama_body()))
    except (ConnectionResetError, asyncio.CancelledError):
        handle.cancel()
        raise
    await response.write_eof()
    return response
