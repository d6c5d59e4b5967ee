"""The one reply pipeline: a submitted request's engine outputs as typed chunks, for every wire format.

:func:`runtime.server.generate.generation.start_generation` submits a request and returns a ``Generation``: its handles
(one per choice); :class:`Reply` reads them. Each wire format only maps what comes out:

- :meth:`Reply.chunks` yields a :class:`Chunk` per read of one choice (outputs that queued up
  arrive merged): its events (``runtime.chat.events``: answer text, reasoning, tool-call deltas;
  plain ``TextDelta`` when no tools are offered and the template does not reason), the
  logprobs of its tokens and of prompt tokens, and on the choice's last chunk the finish reason
  (``tool_calls`` when the reply made calls) and the stop string that hit. Choices of ``n > 1``
  interleave as their tokens come.
- :meth:`Reply.collect` reads it all and returns the whole :class:`Choice` of each.
- :attr:`Reply.usage` counts every choice's tokens, the cached prompt prefix, the reasoning share
  and speculation's counters once, the same for every format.

An engine failure raises ``EngineError`` from ``chunks`` (a stream writes it in its own frame)
and the API error from ``collect``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from runtime.engine.client import EngineError
from runtime.engine.protocol import OutputStream
from runtime.engine.outputs import RequestOutput, TokenLogprob
from runtime.server.generate.error_table import api_error
from runtime.chat.events import (
    Event, ReasoningDelta, TextDelta, ToolCallArgsDelta, ToolCallEnd, ToolCallStart, new_call_id,
)
from runtime.chat.output_parser import OutputParser
from runtime.server.generate.tool_calls import OutputPlan, call_checker


@dataclass(slots=True)
class Chunk:
    """What one read of one choice produced."""

    index: int
    events: list[Event]
    n_tokens: int
    logprobs: list[TokenLogprob] = field(default_factory=list)
    prompt_logprobs: list[TokenLogprob] = field(default_factory=list)
    #: set on the choice's last chunk
    finish: str | None = None
    stop_sequence: str | None = None

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, TextDelta))


@dataclass(slots=True)
class Choice:
    """One choice as it stands (whole once its last chunk has come)."""

    index: int
    parts: list[str] = field(default_factory=list)
    reasoning_parts: list[str] = field(default_factory=list)
    calls: list[dict] = field(default_factory=list)  # {"id", "name", "arguments": JSON text}
    logprobs: list[TokenLogprob] = field(default_factory=list)
    prompt_logprobs: list[TokenLogprob] = field(default_factory=list)
    finish: str | None = None
    stop_sequence: str | None = None
    engine_finish: str | None = None  # the engine's own reason ("length" stays "length" under calls)
    n_tokens: int = 0
    reasoning_tokens: float = 0.0

    @property
    def text(self) -> str:
        return "".join(self.parts)

    @property
    def reasoning(self) -> str:
        return "".join(self.reasoning_parts)


@dataclass(slots=True)
class Usage:
    """The token counts of a whole reply, in one place for every wire format."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    drafted: int = 0
    accepted: int = 0

    @property
    def uncached_prompt_tokens(self) -> int:
        return self.prompt_tokens - min(self.cached_tokens, self.prompt_tokens)

    def openai(self) -> dict:
        body: dict = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": min(self.cached_tokens, self.prompt_tokens)},
        }
        if self.reasoning_tokens:
            body["completion_tokens_details"] = {"reasoning_tokens": self.reasoning_tokens}
        if self.drafted:
            body["speculative"] = {"drafted": self.drafted, "accepted": self.accepted,
                                   "acceptance_rate": round(self.accepted / self.drafted, 4)}
        return body

    def responses(self) -> dict:
        return {"input_tokens": self.prompt_tokens,
                "input_tokens_details": {"cached_tokens": min(self.cached_tokens, self.prompt_tokens),
                                         "cache_write_tokens": 0},
                "output_tokens": self.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
                "total_tokens": self.prompt_tokens + self.completion_tokens}

    def anthropic(self) -> dict:
        return {"input_tokens": self.uncached_prompt_tokens, "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": min(self.cached_tokens, self.prompt_tokens),
                "output_tokens": self.completion_tokens}


def parser_for(plan: OutputPlan) -> OutputParser:
    return OutputParser(plan.contract, plan.tools or None, plan.in_reasoning,
                        call_checker(plan.tools) if plan.tools else None)


class Reply:
    """The outputs of one submitted request (``handles``: one per choice), read through
    ``plan`` (tool calls, reasoning; None: plain text)."""

    def __init__(self, handles: Sequence[OutputStream], plan: OutputPlan | None) -> None:
        self.handles = handles
        self.plan = plan
        self.choices = [Choice(i) for i in range(len(handles))]
        self._parsers = [parser_for(plan) if plan is not None else None for _ in handles]
        self._last: RequestOutput | None = None  # the first choice's final output (cache, speculation)

    @property
    def prompt_tokens(self) -> int:
        return self.handles[0].prompt_tokens

    @property
    def usage(self) -> Usage:
        last = self._last
        return Usage(self.prompt_tokens, sum(c.n_tokens for c in self.choices),
                     last.cached_tokens if last is not None else 0,
                     round(sum(c.reasoning_tokens for c in self.choices)),
                     last.drafted if last is not None else 0, last.accepted if last is not None else 0)

    def cancel(self) -> None:
        """Stop every choice (a no-op for finished ones): frees the request's cells when the client left."""
        for handle in self.handles:
            handle.cancel()

    async def chunks(self) -> AsyncIterator[Chunk]:
        async for i, outs in self._outputs():
            yield self._chunk(i, outs)

    async def collect(self) -> list[Choice]:
        """Every choice whole; an engine error is the API error."""
        try:
            async for _ in self.chunks():
                pass
        except EngineError as e:
            raise api_error(e) from None
        return self.choices

    # -- reading --------------------------------------------------------------------
    def _chunk(self, i: int, outs: list[RequestOutput]) -> Chunk:
        choice, parser = self.choices[i], self._parsers[i]
        last = outs[-1]
        text = "".join(o.text for o in outs)
        n = sum(o.n_tokens for o in outs)
        events: list[Event] = []
        for o in (outs if any(o.reasoning for o in outs) else [RequestOutput(last.request_id, text, n)]):
            if o.reasoning:  # an engine that parsed the reply itself (a remote one)
                events.append(ReasoningDelta(o.reasoning))
            if o.text:
                events += parser.feed(o.text) if parser is not None else [TextDelta(o.text)]
        if last.finish_reason is not None:
            if parser is not None:
                events += parser.finish()
            if last.tool_calls:
                events += self._structured_calls(choice, parser, last.tool_calls)
        chunk = Chunk(i, events, n, [e for o in outs for e in (o.logprobs or ())],
                      [e for o in outs for e in (o.prompt_logprobs or ())])
        answer = sum(len(e.text) for e in events if isinstance(e, TextDelta))
        thought = sum(len(e.text) for e in events if isinstance(e, ReasoningDelta))
        for e in events:
            if isinstance(e, TextDelta):
                choice.parts.append(e.text)
            elif isinstance(e, ReasoningDelta):
                choice.reasoning_parts.append(e.text)
        if thought:  # these tokens were thinking; a read that mixes both is split by characters
            choice.reasoning_tokens += n * thought / (thought + answer)
        elif not answer and parser is not None and parser.state == "reasoning":
            choice.reasoning_tokens += n  # held back inside the thinking block (a partial marker)
        choice.n_tokens += n
        choice.logprobs += chunk.logprobs
        choice.prompt_logprobs += chunk.prompt_logprobs
        if last.finish_reason is not None:
            if i == 0:
                self._last = last
            choice.calls = (list(parser.calls) if parser is not None else []) + choice.calls
            choice.engine_finish = last.finish_reason
            choice.finish = "tool_calls" if choice.calls else last.finish_reason
            choice.stop_sequence = last.stop_sequence
            chunk.finish, chunk.stop_sequence = choice.finish, choice.stop_sequence
        return chunk

    @staticmethod
    def _structured_calls(choice: Choice, parser: OutputParser | None,
                          calls: list[tuple[str, dict]]) -> list[Event]:
        """The events of calls an engine returned structured, numbered after the parsed ones."""
        first = len(parser.calls) if parser is not None else 0
        events: list[Event] = []
        for k, (name, args) in enumerate(calls):
            cid, text = new_call_id(), json.dumps(args, ensure_ascii=False)
            choice.calls.append({"id": cid, "name": name, "arguments": text})
            events += [ToolCallStart(first + k, cid, name), ToolCallArgsDelta(first + k, text), ToolCallEnd(first + k)]
        return events

    async def _outputs(self) -> AsyncIterator[tuple[int, list[RequestOutput]]]:
        """(choice index, outputs) as they come; outputs that queued up arrive together."""
        handles = self.handles
        if len(handles) == 1:
            async for out in handles[0]:
                yield 0, [out, *handles[0].ready()]
            return
        queue: asyncio.Queue = asyncio.Queue()

        async def pump(i: int, handle: OutputStream) -> None:
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
