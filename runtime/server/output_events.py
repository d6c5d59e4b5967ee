"""A model's raw output text as a typed event stream: answer text, reasoning, tool calls.

The contract (every wire format consumes exactly these events, in order):

- ``TextDelta(text)``: answer text; never contains tool-call or reasoning markup.
- ``ReasoningDelta(text)``: thinking (``<think>...</think>`` and the like), without the tags.
- ``ToolCallStart(index, id, name)``: a tool call begins; ``index`` counts calls from 0 in
  the reply, ``id`` is unique (``call_...``), ``name`` is the function's name.
- ``ToolCallArgsDelta(index, fragment)``: the next piece of that call's arguments, JSON text;
  the concatenation of a call's fragments is one JSON object.
- ``ToolCallEnd(index)``: the call is complete (its arguments parse).

A call's Start comes before its ArgsDeltas and its End; calls do not interleave. Text may
come before and (rarely) between calls. :class:`OutputParser` is fed text as the engine
produces it, chunked anywhere (a chunk may end inside a marker); it holds back only what could
still be the start of markup. ``finish()`` flushes the rest: an unterminated call whose JSON
still parses is completed, otherwise its text is returned as answer text (nothing is lost).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from runtime.server.tool_formats import ToolFormat


@dataclass(slots=True)
class TextDelta:
    text: str


@dataclass(slots=True)
class ReasoningDelta:
    text: str


@dataclass(slots=True)
class ToolCallStart:
    index: int
    id: str
    name: str


@dataclass(slots=True)
class ToolCallArgsDelta:
    index: int
    fragment: str


@dataclass(slots=True)
class ToolCallEnd:
    index: int


Event = TextDelta | ReasoningDelta | ToolCallStart | ToolCallArgsDelta | ToolCallEnd


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _held(buf: str, marker: str) -> int:
    """How many trailing characters of ``buf`` could begin ``marker``."""
    for n in range(min(len(marker) - 1, len(buf)), 0, -1):
        if marker.startswith(buf[-n:]):
            return n
    return 0


class OutputParser:
    """Splits one choice's output into events. ``fmt``: the model's tool-call format (None: no
    tools offered); ``think_open``: the model's reasoning markers (``("<think>", "</think>")``)
    or None; ``in_reasoning``: the prompt already opened the thinking block."""

    def __init__(self, fmt: ToolFormat | None = None, think: tuple[str, str] | None = None,
                 in_reasoning: bool = False, accept=None) -> None:
        #: ``accept(name, arguments) -> bool``: a call that fails it (unknown function, arguments
        #: that do not validate) is returned as text instead
        self.accept = accept
        self.fmt = fmt
        self.think = think
        self.buf = ""
        self.state = "reasoning" if (think and in_reasoning) else ("start" if think else "text")
        self.calls: list[dict] = []  # {"id", "name", "arguments"} of the complete calls
        self._open = 0  # calls started
        self._marker = ""

    # -- feeding --------------------------------------------------------------------
    def feed(self, text: str) -> list[Event]:
        self.buf += text
        out: list[Event] = []
        while True:
            before = (self.state, len(self.buf))
            getattr(self, f"_{self.state}")(out, final=False)
            if (self.state, len(self.buf)) == before:
                return out

    def finish(self) -> list[Event]:
        out: list[Event] = []
        for _ in range(8):
            getattr(self, f"_{self.state}")(out, final=True)
            if not self.buf:
                break
        if self.buf:
            out.append(ReasoningDelta(self.buf) if self.state == "reasoning" else TextDelta(self.buf))
            self.buf = ""
        return out

    # -- states ---------------------------------------------------------------------
    def _start(self, out: list[Event], final: bool) -> None:
        """Reasoning models: the reply may open with the thinking block (after whitespace)."""
        opening = self.think[0]
        stripped = self.buf.lstrip()
        if stripped.startswith(opening):
            self.buf = stripped[len(opening):]
            self.state = "reasoning"
        elif final or not opening.startswith(stripped):
            self.state = "text"

    def _reasoning(self, out: list[Event], final: bool) -> None:
        closing = self.think[1]
        at = self.buf.find(closing)
        if at >= 0:
            if at:
                out.append(ReasoningDelta(self.buf[:at]))
            self.buf = self.buf[at + len(closing):].lstrip("\n")
            self.state = "text"
            return
        keep = 0 if final else _held(self.buf, closing)
        if len(self.buf) > keep:
            out.append(ReasoningDelta(self.buf[:len(self.buf) - keep]))
            self.buf = self.buf[len(self.buf) - keep:]

    def _text(self, out: list[Event], final: bool) -> None:
        fmt = self.fmt
        if fmt is None:
            if self.buf:
                out.append(TextDelta(self.buf))
                self.buf = ""
            return
        at, marker = fmt.find_start(self.buf)
        if at >= 0:
            if self.buf[:at].strip():  # whitespace right before a call is dropped
                out.append(TextDelta(self.buf[:at].rstrip()))
            self.buf = self.buf[at + len(marker):]
            self._marker = marker  # "" when the marker is the body's own start
            self.state = "call"
            return
        if final and self.calls and not self.buf.strip():
            self.buf = ""  # whitespace after the last call
            return
        if final:
            n = len(self.buf)
        else:  # hold a possible marker start, and the whitespace before it
            n = len(self.buf[:len(self.buf) - fmt.held(self.buf)].rstrip())
        if n:
            out.append(TextDelta(self.buf[:n]))
            self.buf = self.buf[n:]

    def _call(self, out: list[Event], final: bool) -> None:
        """Inside a call's markup: wait for its end, then emit the calls it holds."""
        body, rest = self.fmt.split_body(self.buf, final)
        if body is None:
            if final:  # cut off inside the call: keep its text rather than lose it
                self.state = "text"
                out.append(TextDelta(self._marker + self.buf))
                self.buf = ""
            return
        calls = self.fmt.parse_body(body)
        if calls is not None and self.accept is not None and not all(self.accept(n, a) for n, a in calls):
            calls = None
        if calls is None:
            out.append(TextDelta(self._marker + body))
        else:
            for name, args in calls:
                i = self._open
                self._open += 1
                cid = new_call_id()
                text = json.dumps(args, ensure_ascii=False)
                self.calls.append({"id": cid, "name": name, "arguments": text})
                out += [ToolCallStart(i, cid, name), ToolCallArgsDelta(i, text), ToolCallEnd(i)]
        self.buf = rest
        self.state = "text"


def parse_all(text: str, fmt: ToolFormat | None, think: tuple[str, str] | None = None,
              in_reasoning: bool = False, accept=None) -> tuple[str, str, list[dict]]:
    """A whole reply: (answer text, reasoning text, calls)."""
    p = OutputParser(fmt, think, in_reasoning, accept)
    events = p.feed(text) + p.finish()
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    return answer, reasoning, p.calls
