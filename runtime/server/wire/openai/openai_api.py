"""OpenAI-compatible endpoints: /v1/chat/completions, /v1/completions (/v1/models: models_api), and
Hearth's /hearth/count_tokens for a chat completion's body.

Both read the engine through the one reply pipeline (``reply.Reply``); this module maps its
chunks to OpenAI's objects and ``chat.completion.chunk`` / ``text_completion`` frames:
``TextDelta`` -> ``delta.content``, ``ReasoningDelta`` -> ``delta.reasoning_content``,
``ToolCallStart`` -> ``delta.tool_calls[{index, id, type, function: {name, arguments: ""}}]``,
``ToolCallArgsDelta`` -> ``delta.tool_calls[{index, function: {arguments}}]``; logprobs go with the
first frame of the tokens they belong to, under tools and reasoning too; a choice's last frame
carries its ``finish_reason`` (``tool_calls`` when it made calls).
"""

from __future__ import annotations

import asyncio
import time
import uuid

from aiohttp import web

from runtime.engine.client import EngineError
from runtime.server import sse
from runtime.server.errors import bad_request
from runtime.server.generate.generation import count_prompt_tokens, start_generation
from runtime.server.generate.error_table import api_error
from runtime.server.generate.logprobs_api import CompletionLogprobs, chat_content, echo_text
from runtime.chat.events import Event, ReasoningDelta, TextDelta, ToolCallArgsDelta, ToolCallStart
from runtime.server.generate.reply import Choice, Reply
from runtime.server.generate.request import GenerationRequest
from runtime.server.wire.openai.schemas import parse_chat, parse_completion
from runtime.server.validation import read_parsed


def chat_message(text: str, reasoning: str, calls: list[dict]) -> dict:
    """An assistant ``message``: ``content`` is None when the reply is only calls."""
    msg: dict = {"role": "assistant", "content": text if (text or not calls) else None, "refusal": None}
    if reasoning:
        msg["reasoning_content"] = reasoning
    if calls:
        msg["tool_calls"] = [{"id": c["id"], "type": "function",
                              "function": {"name": c["name"], "arguments": c["arguments"]}} for c in calls]
    return msg


def chat_delta(event: Event) -> dict | None:
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


class _Chat:
    prefix, obj, chunk_obj = "chatcmpl", "chat.completion", "chat.completion.chunk"
    text_path = ("choices", 0, "delta", "content")

    @staticmethod
    def full(choice: Choice, echo: str, lp: dict | None) -> dict:
        return {"index": choice.index, "message": chat_message(choice.text, choice.reasoning, choice.calls),
                "logprobs": lp, "finish_reason": choice.finish}

    @staticmethod
    def frame(index: int, delta: dict, finish: str | None = None, lp: dict | None = None) -> dict:
        return {"index": index, "delta": delta, "logprobs": lp, "finish_reason": finish}

    @staticmethod
    def deltas(events: list[Event]) -> list[dict]:
        return [d for d in map(chat_delta, events) if d is not None]

    @staticmethod
    def logprobs(state, entries: list) -> dict:
        """``logprobs`` of a choice (or a delta) from its entries; ``state`` is unused."""
        return {"content": chat_content(entries), "refusal": None}


class _Text:
    prefix, obj, chunk_obj = "cmpl", "text_completion", "text_completion"
    text_path = ("choices", 0, "text")

    @staticmethod
    def full(choice: Choice, echo: str, lp: dict | None) -> dict:
        return {"index": choice.index, "text": echo + choice.text, "logprobs": lp, "finish_reason": choice.finish}

    @staticmethod
    def frame(index: int, delta: dict, finish: str | None = None, lp: dict | None = None) -> dict:
        return {"index": index, "text": delta.get("content", ""), "logprobs": lp, "finish_reason": finish}

    @staticmethod
    def deltas(events: list[Event]) -> list[dict]:
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        return [{"content": text}] if text else []

    @staticmethod
    def logprobs(state: CompletionLogprobs, entries: list) -> dict:
        """The legacy ``logprobs`` of these generated tokens (prompt ones apart)."""
        return state.add(entries)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, await read_parsed(request, parse_chat), _Chat)


async def count_tokens(request: web.Request) -> web.Response:
    """``POST /hearth/count_tokens``: a chat completion's body counted as the service would send it
    to the model (its template, the tools, the ``context_overflow`` policy), nothing generated:
    ``{"prompt_tokens", "dropped_messages"}``."""
    count = await count_prompt_tokens(request, await read_parsed(request, parse_chat))
    return web.json_response({"prompt_tokens": count.tokens, "dropped_messages": count.dropped_messages})


async def completions(request: web.Request) -> web.StreamResponse:
    req = await read_parsed(request, parse_completion)
    if req.echo and req.prompt is None and not req.params.prompt_logprobs:
        raise bad_request("'echo' with a prompt of token ids needs 'logprobs'", "echo")
    return await _generate(request, req, _Text)


async def _generate(request: web.Request, req: GenerationRequest, fmt) -> web.StreamResponse:
    gen = await start_generation(request, req)
    head = {"id": f"{fmt.prefix}-{uuid.uuid4().hex}", "object": fmt.obj, "created": int(time.time()),
            "model": gen.engine.model_id}
    reply = gen.reply(parsed=fmt is _Chat)  # completions: the raw text, as the client asked
    try:
        if req.stream:
            return await _stream(request, req, reply, head, fmt)
        return await _collect(req, reply, head, fmt)
    finally:
        reply.cancel()  # no-op once finished; frees the request's cells if the client left


async def _collect(req: GenerationRequest, reply: Reply, head: dict, fmt) -> web.Response:
    choices = await reply.collect()
    prompt_entries = choices[0].prompt_logprobs
    echo = (req.prompt if req.prompt is not None else echo_text(prompt_entries)) if req.echo else ""
    out = []
    for c in choices:
        lp = None
        if req.params.logprobs and fmt is _Text:
            state = CompletionLogprobs(req.params.top_logprobs)
            parts = [_echo_logprobs(state, prompt_entries, echo)] if req.params.prompt_logprobs else []
            lp = CompletionLogprobs.merge(parts + [fmt.logprobs(state, c.logprobs)])
        elif req.params.logprobs:
            lp = fmt.logprobs(None, c.logprobs)
        out.append(fmt.full(c, echo, lp))
    return web.json_response({**head, "choices": out, "usage": reply.usage.openai()})


def _echo_logprobs(state: CompletionLogprobs, entries: list, echo: str) -> dict:
    """The prompt's part of a choice's legacy logprobs; generated offsets follow the echo."""
    part = state.add(entries)
    state.offset = len(echo)
    return part


async def _stream(request: web.Request, req: GenerationRequest, reply: Reply, head: dict, fmt):
    chunk_head = {**head, "object": fmt.chunk_obj}
    n = len(reply.handles)
    fast = [sse.TextFrames({**chunk_head, "choices": [fmt.frame(i, {"content": "x"})]}, fmt.text_path)
            for i in range(n)]

    def frame(i: int, delta: dict, finish: str | None = None, lp: dict | None = None) -> bytes:
        if finish is None and lp is None and list(delta) == ["content"]:
            return fast[i](delta["content"])  # one frame per token: its JSON is encoded once
        return sse.frame({**chunk_head, "choices": [fmt.frame(i, delta, finish, lp)]})

    response = await sse.open_stream(request)
    write = response.write
    with_lp = req.params.logprobs
    states = [CompletionLogprobs(req.params.top_logprobs) for _ in range(n)]
    # echo with logprobs: the echo goes out once the prompt's logprobs have all come
    echo_later = req.echo and req.params.prompt_logprobs
    prompt_entries: list = []
    try:
        for i in range(n):
            if fmt is _Chat:
                await write(sse.frame({**chunk_head, "choices": [fmt.frame(i, {"role": "assistant", "content": ""})]}))
            elif req.echo and req.prompt and not echo_later:
                await write(frame(i, {"content": req.prompt}))
        async for ch in reply.chunks():
            if echo_later:
                prompt_entries += ch.prompt_logprobs
                if len(prompt_entries) >= reply.prompt_tokens:
                    echo_later = False
                    await _write_echo(write, chunk_head, req, states, prompt_entries)
            i = ch.index
            last_text = ch.finish is not None and fmt is _Text  # its frame has logprobs, even empty ones
            lp = fmt.logprobs(states[i], ch.logprobs) if with_lp and (ch.logprobs or last_text) else None
            deltas = fmt.deltas(ch.events)
            if last_text:
                await write(frame(i, deltas[0] if deltas else {}, ch.finish, lp))
                continue
            for k, delta in enumerate(deltas):
                await write(frame(i, delta, None, lp if k == 0 else None))
            if not deltas and lp is not None:
                await write(frame(i, {}, None, lp))
            if ch.finish is not None:
                await write(frame(i, {}, ch.finish))
        if req.include_usage:
            await write(sse.frame({**chunk_head, "choices": [], "usage": reply.usage.openai()}))
    except EngineError as e:
        await write(sse.frame(api_error(e).body()))
    except (ConnectionResetError, asyncio.CancelledError):
        reply.cancel()
        raise
    await write(sse.DONE)
    await response.write_eof()
    return response


async def _write_echo(write, chunk_head: dict, req: GenerationRequest, states: list, entries: list) -> None:
    """One chunk per choice with the echoed prompt and its logprobs (the first token's null)."""
    echo = req.prompt if req.prompt is not None else echo_text(entries)
    for i, state in enumerate(states):
        lp = _echo_logprobs(state, entries, echo)
        await write(sse.frame({**chunk_head, "choices": [_Text.frame(i, {"content": echo}, None, lp)]}))
