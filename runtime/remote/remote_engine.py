"""A model served by an upstream, behind the same engine interface as a local worker.

``submit`` sends the request as OpenAI chat (messages) or completions (a prompt or token ids),
always streamed, and returns streams of the same ``RequestOutput`` objects a local engine
yields, so every wire format Hearth speaks reaches an upstream unchanged: one upstream event,
one output, one frame to the client. The answer is read as it comes, with no task of its own:
cancelling a stream (the client left) closes the upstream response, which ends the request
there.

Failover: until the first event of the answer has been read, nothing has reached the client,
so a failure (refused connection, an error status, a timeout) moves on to the next upstream
offering the model, healthiest first. After the first event, a failure ends the request with
``UpstreamFailed``; it is never replayed.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import aiohttp

from runtime.chat.contract import JSON, CallSyntax, OutputContract, ReasoningSyntax
from runtime.media import Media, MediaPlaces, with_media_parts
from runtime.engine.outputs import RequestOutput
from runtime.engine.protocol import EngineError, ErrorCode, PromptCount, RequestRefused, UpstreamFailed
from runtime.tool_choice import ToolChoice
from runtime.remote.wire import (
    EventReader, MalformedStream, ToolCalls, chunk_logprobs, chunk_parts, error_message, parse_event,
    read_error_body, reasoning_part, request_body, tool_call_deltas,
)

if TYPE_CHECKING:
    from runtime.remote.registry import Remotes
    from runtime.remote.upstream import Upstream

log = logging.getLogger("hearth.remote")
#: events read from a stream between two turns given to the event loop
YIELD_EVERY = 8
_ids = itertools.count(1)
#: statuses after which another upstream may be tried (this one is unwell, or lacks the model)
_FAILOVER_STATUSES = {401, 403, 404, 408, 429, 500, 502, 503, 504}
#: what the service's output planner knows of an upstream's output: it renders tools itself (so
#: messages and tools go on as they are) and may reason; its calls and reasoning come back
#: structured (``RequestOutput.tool_calls`` / ``.reasoning``), never as markup to re-parse, so
#: the call syntax here only shapes the grammar a forced call is compiled to
REMOTE_CONTRACT = OutputContract(calls=CallSyntax(JSON, call_start="<tool_call>\n", call_end="\n</tool_call>",
                                                  call_sep="\n"),
                                 reasoning=ReasoningSyntax("<think>", "</think>"), native_tools=True)


@dataclass(slots=True)
class RemoteLoaded:
    pid: int = 0
    n_ctx: int = 0
    max_request_tokens: int = 0  #: the upstream's context when it says (0: unknown)
    info: dict = field(default_factory=dict)
    n_vocab: int | None = None  #: the upstream's vocabulary is not known: token ids are its to check
    chat_template: str | None = None
    contract: OutputContract = REMOTE_CONTRACT


def connect_reason(e: aiohttp.ClientConnectorError) -> str:
    """Why a connection failed, in the operating system's words for its error number only."""
    errno = getattr(e.os_error, "errno", None)
    return os.strerror(errno) if isinstance(errno, int) and errno > 0 else "the connection failed"


def _retry_after(headers) -> int | None:
    value = headers.get("Retry-After")
    if value and value.strip().isascii() and value.strip().isdigit():
        return int(value.strip())
    return None


class RemoteStream:
    """One request at one upstream: ``prompt_tokens`` (from the final usage), then outputs."""

    def __init__(self, engine: "RemoteEngine", upstream: "Upstream", response: aiohttp.ClientResponse,
                 reader: EventReader) -> None:
        self.request_id = f"remote-{next(_ids)}"
        self.prompt_tokens = 0
        self.dropped_messages = 0  # (the upstream gets the whole conversation)
        self.finished = False
        self.engine, self.upstream, self.response, self.reader = engine, upstream, response, reader
        self.ended_by: EngineError | None = None  #: set by ``fail_all``: raised instead of reading on
        self.counted = 0  #: tokens given out so far (one per piece of text)
        self.usage_tokens: int | None = None  #: the upstream's count, from its usage chunk
        self._complete = False  #: the finish reason has come
        self.tool_calls = ToolCalls()
        self.logprobs = False  #: the request asked for logprobs (the upstream sends them with each chunk)
        self._events_read = 0

    def __aiter__(self) -> "RemoteStream":
        return self

    async def _event(self) -> dict | None:
        """The next event's JSON (None at ``[DONE]`` or the end of the body). Reading what is
        already buffered never waits, so a fast upstream would hold the event loop: every
        ``YIELD_EVERY`` events the loop gets a turn (``/health`` and the other requests)."""
        self._events_read += 1
        if self._events_read % YIELD_EVERY == 0:
            await asyncio.sleep(0)
        while not self.reader.events:
            if self.ended_by is not None:
                raise self.ended_by
            try:
                chunk = await asyncio.wait_for(self.response.content.readany(), self.upstream.timeouts.idle)
            except asyncio.TimeoutError:
                raise self._fail(f"upstream {self.upstream.name} sent nothing for "
                                 f"{self.upstream.timeouts.idle:g} s (idle timeout)", ErrorCode.UPSTREAM_TIMEOUT,
                                 504) from None
            except aiohttp.ClientError as e:
                if self.ended_by is not None:
                    raise self.ended_by from None
                raise self._fail(f"upstream {self.upstream.name} dropped the connection before the reply was "
                                 f"complete ({type(e).__name__})") from None
            if self.ended_by is not None:
                raise self.ended_by
            if not chunk:
                self.reader.end()
                if not self.reader.events:
                    return None
                break
            self.reader.feed(chunk)
        return parse_event(self.reader.events.pop(0))

    async def __anext__(self) -> RequestOutput:
        if self.ended_by is not None:
            raise self.ended_by
        if self.finished:
            raise StopAsyncIteration
        try:
            while True:
                obj = await self._event()
                if obj is None:
                    raise self._fail(f"upstream {self.upstream.name} ended the stream before the reply was complete")
                if obj.get("error"):
                    log.warning("upstream %s failed mid-stream: %s", self.upstream.name,
                                error_message(json.dumps(obj))[:200])
                    raise self._fail(f"upstream {self.upstream.name} failed mid-stream (its message is in the "
                                     "service log)")
                text, finish, usage = chunk_parts(obj)
                entries = chunk_logprobs(obj) if self.logprobs else []
                reasoning = reasoning_part(obj)
                self.tool_calls.add(tool_call_deltas(obj))
                if usage is not None:
                    self._usage(usage)
                if finish is not None:
                    return await self._final(text, finish, entries, reasoning, self.tool_calls.finished() or None)
                if text or entries or reasoning:
                    n = len(entries) or 1
                    self.counted += n
                    return RequestOutput(self.request_id, text, n, logprobs=entries or None, reasoning=reasoning)
        except MalformedStream as e:
            raise self._fail(f"upstream {self.upstream.name} sent a malformed stream: {e}") from None

    async def _final(self, text: str, finish: str, entries: list | None = None, reasoning: str = "",
                     calls: list[tuple[str, dict]] | None = None) -> RequestOutput:
        """The last output: the usage chunk and ``[DONE]`` that follow are read first (bounded
        by the idle timeout), so the token counts are the upstream's."""
        self._complete = True  # what follows cannot fail the reply, nor count against the upstream
        try:
            while (obj := await self._event()) is not None:
                usage = chunk_parts(obj)[2]
                if usage is not None:
                    self._usage(usage)
        except (UpstreamFailed, MalformedStream):
            pass  # the reply itself is complete
        if self.usage_tokens is not None:
            n = max(self.usage_tokens - self.counted, 0)
        else:
            n = len(entries or ()) or (1 if text else 0)
        self.counted += n
        self._done(ok=True)
        return RequestOutput(self.request_id, text, n, finish_reason=finish, logprobs=entries or None,
                             reasoning=reasoning, tool_calls=calls)

    def _usage(self, usage: dict) -> None:
        p, c = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if isinstance(p, int) and p >= 0:
            self.prompt_tokens = p
        if isinstance(c, int) and c >= 0:
            self.usage_tokens = c

    def _fail(self, message: str, code: ErrorCode = ErrorCode.UPSTREAM_ERROR, status: int = 502) -> UpstreamFailed:
        if not self._complete:
            self.engine.remotes.health_of(self.upstream.name).failed(message)
        self._done(ok=self._complete)
        return UpstreamFailed(message, code, status)

    def _done(self, ok: bool) -> None:
        if not self.finished:
            self.finished = True
            if ok:
                self.engine.remotes.health_of(self.upstream.name).ok()
            self.response.close()
            self.engine._open.discard(self)

    def ready(self) -> list[RequestOutput]:
        return []  # each upstream event is its own output (frame by frame)

    def end(self, error: EngineError) -> None:
        """End the request with ``error`` (the service stops): its next read raises it."""
        if not self.finished:
            self.ended_by = error
            self.cancel()

    def cancel(self) -> None:
        """Stop reading and close the upstream response: the upstream sees its client leave."""
        if not self.finished:
            self.finished = True
            self.response.close()
            self.engine._open.discard(self)


class RemoteEngine:
    """``model_id`` as the API names it (``model`` as the upstreams do), served by the upstreams
    ``remotes.offers`` returns (only ``upstream`` when given)."""

    def __init__(self, remotes: "Remotes", model_id: str, upstream: str | None = None,
                 model: str | None = None) -> None:
        self.remotes, self.model_id, self.only = remotes, model_id, upstream
        self.model = model or model_id
        self.stats = None
        self.error: str | None = None
        self._open: set[RemoteStream] = set()
        self._closed = False
        remotes.engines_made.add(self)
        ctx = remotes.context_length(self.model, upstream) or 0
        self.loaded = RemoteLoaded(n_ctx=ctx, max_request_tokens=ctx, info={"remote": True},
                                   contract=REMOTE_CONTRACT)

    @property
    def alive(self) -> bool:
        return not self._closed

    @property
    def active(self) -> int:
        return len(self._open)

    @property
    def pid(self) -> int | None:
        return None

    async def start(self) -> RemoteLoaded:
        return self.loaded

    async def submit(self, params, *, prompt: str | None = None, messages: list[dict] | None = None,
                     tokens: list[int] | None = None, n: int = 1, constraint=None,
                     template_vars: dict | None = None, media: list[Media] | None = None,
                     tool_choice: ToolChoice | None = None, overflow: str | None = None,
                     owner=None) -> list[RemoteStream]:
        tools = (template_vars or {}).get("tools")
        if media and messages is not None:
            try:
                messages = with_media_parts(messages, media)  # as OpenAI content parts, which upstreams read
            except MediaPlaces as e:
                raise RequestRefused(str(e), ErrorCode.INVALID_MEDIA) from None
        response_format = None
        if constraint is not None and not tools:  # the tools' constraint is the upstream's business
            response_format = self._response_format(constraint, messages is not None)
        if params.prompt_logprobs:
            raise RequestRefused(f"{self.model_id} is a remote model: the prompt's logprobs (echo with logprobs) "
                                 "are not forwarded to upstreams")
        if params.logprobs and messages is not None:
            # remote chats take the output planner's path (reasoning, tool calls), which has no logprobs
            raise RequestRefused(f"{self.model_id} is a remote model: logprobs are forwarded for completions "
                                 "(/v1/completions), not for chats")
        streams: list[RemoteStream] = []
        try:
            for _ in range(n):
                streams.append(await self._open_stream(params, prompt, messages, tokens, tools, template_vars,
                                                       response_format, tool_choice))
        except BaseException:
            for s in streams:
                s.cancel()
            raise
        return streams

    def _response_format(self, constraint, chat: bool) -> dict:
        """OpenAI's ``response_format`` for a JSON constraint (the schema is inside its grammar);
        other constraints (regex, grammars) have no OpenAI form: refused."""
        grammar = json.loads(constraint.grammar) if constraint.kind in ("json_schema", "json_object") else {}
        schema = next((g.get("json_schema") for g in grammar.get("grammars", []) if g.get("json_schema")), None)
        if not chat or schema is None:
            raise RequestRefused(f"{self.model_id} is a remote model: only JSON output (response_format "
                                 "json_object or json_schema, in a chat) is forwarded to upstreams")
        schema = {k: v for k, v in schema.items() if k != "x-guidance"}
        if constraint.kind == "json_object":
            return {"type": "json_object"}
        return {"type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": True}}

    async def _open_stream(self, params, prompt, messages, tokens, tools=None, template_vars=None,
                           response_format=None, tool_choice: ToolChoice | None = None) -> RemoteStream:
        offers = self.remotes.offers(self.model, self.only)
        if not offers:
            raise UpstreamFailed(f"no upstream offers {self.model_id} now", ErrorCode.UPSTREAM_UNAVAILABLE, 502)
        errors: list[UpstreamFailed] = []
        for upstream, upstream_model in offers:
            path, body = request_body(upstream_model, params, prompt=prompt, messages=messages, tokens=tokens,
                                      tools=tools, thinking=(template_vars or {}).get("enable_thinking"),
                                      tool_choice=tool_choice)
            if response_format is not None:
                body["response_format"] = response_format
            try:
                return await self._try(upstream, path, body)
            except UpstreamFailed as e:
                errors.append(e)
                if e.status == 400:
                    raise
        if len(errors) == 1:
            raise errors[0]
        last = errors[-1]
        raise UpstreamFailed("no upstream could serve the request: " + "; ".join(str(e) for e in errors),
                             last.code, last.status, last.retry_after)

    async def _try(self, upstream: "Upstream", path: str, body: dict) -> RemoteStream:
        """Send to one upstream and read up to the first event (the first-byte timeout)."""
        health = self.remotes.health_of(upstream.name)
        health.requests += 1
        t = upstream.timeouts
        session = self.remotes.session()
        headers = {"Accept": "text/event-stream"}
        key = self.remotes.key_for(upstream)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        response = None
        try:
            async with asyncio.timeout(t.first_byte):
                response = await session.post(
                    upstream.endpoint(path), json=body, headers=headers, allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(total=None, connect=None, sock_connect=t.connect))
                if response.status != 200:
                    raise self._status_error(upstream, response.status, await read_error_body(response),
                                             response.headers)
                stream = RemoteStream(self, upstream, response, EventReader())
                while not stream.reader.events:
                    chunk = await response.content.readany()
                    if not chunk:
                        stream.reader.end()
                        break
                    stream.reader.feed(chunk)
                if not stream.reader.events:
                    raise UpstreamFailed(f"upstream {upstream.name} answered with an empty stream")
        except aiohttp.ConnectionTimeoutError:
            err = UpstreamFailed(f"upstream {upstream.name} ({upstream.host}) did not accept the connection within "
                                 f"{t.connect:g} s (connect timeout)", ErrorCode.UPSTREAM_TIMEOUT, 504)
            health.failed(str(err), unreachable=True)
            raise err from None
        except asyncio.TimeoutError:
            if response is not None:
                response.close()
            e = UpstreamFailed(f"upstream {upstream.name} did not answer within {t.first_byte:g} s "
                               "(first-byte timeout)", ErrorCode.UPSTREAM_TIMEOUT, 504)
            health.failed(str(e))
            raise e from None
        except aiohttp.ClientConnectorError as e:
            err = UpstreamFailed(f"upstream {upstream.name} ({upstream.host}) cannot be reached: {connect_reason(e)}",
                                 ErrorCode.UPSTREAM_UNAVAILABLE, 502)
            health.failed(str(err), unreachable=True)
            raise err from None
        except (aiohttp.ClientError, MalformedStream) as e:
            if response is not None:
                response.close()
            # aiohttp's messages quote what the address sent: only the kind of failure is told
            reason = str(e) if isinstance(e, MalformedStream) else f"no valid HTTP answer ({type(e).__name__})"
            err = UpstreamFailed(f"upstream {upstream.name} failed: {reason}")
            health.failed(str(err))
            raise err from None
        except UpstreamFailed as e:
            if response is not None:
                response.close()
            if e.status != 400:
                health.failed(str(e))
            raise
        except BaseException:  # cancelled: the client left before the first byte
            if response is not None:
                response.close()
            raise
        health.ok()
        stream.logprobs = bool(body.get("logprobs") is not None and body.get("logprobs") is not False)
        self._open.add(stream)
        return stream

    def _status_error(self, upstream: "Upstream", status: int, body: bytes, headers) -> UpstreamFailed:
        """The error for an answer that is not 200: the status and Hearth's words. The upstream's
        own message goes to the service log only (a client never reads what an address sent)."""
        who = f"upstream {upstream.name}"
        log.warning("%s answered HTTP %s: %s", who, status, error_message(body)[:300])
        seen = f"HTTP {status}; its message is in the service log"
        if status in (401, 403):
            return UpstreamFailed(f"{who} refused Hearth's request ({seen}); check its API key "
                                  f"(`hearth remote add {upstream.name} URL --key-from-env VAR`)",
                                  ErrorCode.UPSTREAM_REFUSED, 502)
        if status == 429:
            return UpstreamFailed(f"{who} is rate limiting (HTTP 429)", ErrorCode.UPSTREAM_RATE_LIMITED, 429,
                                  _retry_after(headers))
        if status == 503:
            return UpstreamFailed(f"{who} is unavailable (HTTP 503)", ErrorCode.UPSTREAM_UNAVAILABLE, 503,
                                  _retry_after(headers))
        if 300 <= status < 400:
            return UpstreamFailed(f"{who} answered with a redirect (HTTP {status}); Hearth does not follow "
                                  "redirects: give the upstream's final address", ErrorCode.UPSTREAM_ERROR, 502)
        if status in _FAILOVER_STATUSES:
            if status == 404:
                self.remotes.stale(upstream.name)
            return UpstreamFailed(f"{who} answered {seen}", ErrorCode.UPSTREAM_ERROR, 502)
        # the request itself was refused (too long, a bad parameter): the client's to fix, no failover
        return UpstreamFailed(f"{who} refused the request ({seen})", ErrorCode.INVALID_REQUEST, 400)

    async def count_tokens(self, *, prompt: str | None = None, messages: list[dict] | None = None,
                           media: list[Media] | None = None, overflow: str | None = None,
                           max_tokens: int | None = None) -> PromptCount:
        raise RequestRefused(f"{self.model_id} is a remote model: its upstream does not count tokens for Hearth")

    def cancel(self, request_id: str) -> None:
        for s in list(self._open):
            if s.request_id == request_id:
                s.cancel()

    def fail_all(self, error: EngineError) -> None:
        for s in list(self._open):
            s.end(error)

    async def close(self) -> None:
        self._closed = True
        self.fail_all(EngineError("closed"))
