"""OpenAI-compatible endpoints: /v1/chat/completions, /v1/completions (/v1/models: models_api)."""

from __future__ import annotations

import asyncio
import time
import uuid

from aiohttp import web

from runtime.engine.client import EngineError, RequestHandle
from runtime.server import chat_output, sse
from runtime.server.errors import bad_request
from runtime.server.generation import engine_error, start_generation, usage
from runtime.server.logprobs_api import CompletionLogprobs, chat_content, echo_text
from runtime.server.schemas import GenerationRequest, parse_chat, parse_completion
from runtime.server.validation import read_json  # noqa: F401 - the other routes import it from here


class _Chat:
    prefix, obj, chunk_obj = "chatcmpl", "chat.completion", "chat.completion.chunk"
    text_path = ("choices", 0, "delta", "content")

    @staticmethod
    def full(index: int, text: str, finish: str | None, lp: dict | None = None) -> dict:
        return {"index": index, "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": lp, "finish_reason": finish}

    @staticmethod
    def delta(index: int, text: str | None, finish: str | None, first: bool = False, lp: dict | None = None) -> dict:
        d: dict = {"role": "assistant", "content": ""} if first else ({"content": text} if text else {})
        return {"index": index, "delta": d, "logprobs": lp, "finish_reason": finish}

    @staticmethod
    def logprobs(state, outs: list) -> dict:
        """``logprobs`` of a choice (or a delta) from its outputs; ``state`` is unused."""
        return {"content": chat_content([e for o in outs for e in (o.logprobs or ())]), "refusal": None}


class _Text:
    prefix, obj, chunk_obj = "cmpl", "text_completion", "text_completion"
    text_path = ("choices", 0, "text")

    @staticmethod
    def full(index: int, text: str, finish: str | None, lp: dict | None = None) -> dict:
        return {"index": index, "text": text, "logprobs": lp, "finish_reason": finish}

    @staticmethod
    def delta(index: int, text: str | None, finish: str | None, first: bool = False, lp: dict | None = None) -> dict:
        return {"index": index, "text": text or "", "logprobs": lp, "finish_reason": finish}

    @staticmethod
    def logprobs(state: CompletionLogprobs, outs: list) -> dict:
        """The legacy ``logprobs`` of the generated tokens in ``outs`` (prompt ones apart)."""
        return state.add([e for o in outs for e in (o.logprobs or ())])


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, parse_chat(await read_json(request)), _Chat)


async def completions(request: web.Request) -> web.StreamResponse:
    req = parse_completion(await read_json(request))
    if req.echo and req.prompt is None and not req.params.prompt_logprobs:
        raise bad_request("'echo' with a prompt of token ids needs 'logprobs'", "echo")
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
    async def one(handle: RequestHandle) -> list:
        return [out async for out in handle]

    try:
        results = await asyncio.gather(*[one(h) for h in handles])
    except EngineError as e:
        raise engine_error(e) from None
    prompt_entries = [e for o in results[0] for e in (o.prompt_logprobs or ())]
    echo = (req.prompt if req.prompt is not None else echo_text(prompt_entries)) if req.echo else ""
    choices = []
    for i, outs in enumerate(results):
        text = echo + "".join(o.text for o in outs)
        finish = outs[-1].finish_reason if outs else None
        lp = None
        if req.params.logprobs and fmt is _Text:
            state = CompletionLogprobs(req.params.top_logprobs)
            parts = [_echo_logprobs(state, prompt_entries, echo)] if req.params.prompt_logprobs else []
            lp = CompletionLogprobs.merge(parts + [fmt.logprobs(state, outs)])
        elif req.params.logprobs:
            lp = fmt.logprobs(None, outs)
        choices.append(fmt.full(i, text, finish, lp))
    total = sum(o.n_tokens for outs in results for o in outs)
    last = results[0][-1] if results[0] else None
    body = {**head, "choices": choices, "usage": usage(handles[0].prompt_tokens, total, last)}
    return web.json_response(body)


def _echo_logprobs(state: CompletionLogprobs, entries: list, echo: str) -> dict:
    """The prompt's part of a choice's legacy logprobs; generated offsets follow the echo."""
    part = state.add(entries)
    state.offset = len(echo)
    return part


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
    with_lp = req.params.logprobs
    states = [CompletionLogprobs(req.params.top_logprobs) for _ in handles]
    # echo with logprobs: the echo goes out once the prompt's logprobs have all come
    echo_later = req.echo and req.params.prompt_logprobs
    prompt_entries: list = []
    try:
        for i in range(len(handles)):
            if fmt is _Chat:
                await write(sse.frame({**chunk_head, "choices": [fmt.delta(i, None, None, first=True)]}))
            elif req.echo and req.prompt and not echo_later:
                await write(sse.frame({**chunk_head, "choices": [fmt.delta(i, req.prompt, None)]}))
        async for i, outs in _merged(handles):
            if echo_later:
                prompt_entries += [e for o in outs for e in (o.prompt_logprobs or ())]
                if len(prompt_entries) >= handles[0].prompt_tokens:
                    echo_later = False
                    await _write_echo(write, chunk_head, req, states, prompt_entries)
            text = "".join(o.text for o in outs)
            finish = outs[-1].finish_reason
            n += sum(o.n_tokens for o in outs)
            if i == 0:
                cached = outs[-1]
            lp = fmt.logprobs(states[i], outs) if with_lp else None
            if finish is not None:
                await write(sse.frame({**chunk_head, "choices": [fmt.delta(i, text, finish, lp=lp)]}))
            elif with_lp and any(o.logprobs for o in outs):
                await write(sse.frame({**chunk_head, "choices": [fmt.delta(i, text, None, lp=lp)]}))
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


async def _write_echo(write, chunk_head: dict, req: GenerationRequest, states: list, entries: list) -> None:
    """One chunk per choice with the echoed prompt and its logprobs (the first token's null)."""
    echo = req.prompt if req.prompt is not None else echo_text(entries)
    for i, state in enumerate(states):
        lp = _echo_logprobs(state, entries, echo)
        await write(sse.frame({**chunk_head, "choices": [_Text.delta(i, echo, None, lp=lp)]}))

