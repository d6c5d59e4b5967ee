"""A model's raw output text as a typed event stream: answer text, reasoning, tool calls.

The contract (every wire format consumes exactly these events, in order):

- ``TextDelta(text)``: answer text; never contains tool-call or reasoning markup.
- ``ReasoningDelta(text)``: thinking (``<think>...</think>`` and the like), without the tags.
- ``ToolCallStart(index, id, name)``: a tool call begins; ``index`` counts calls from 0 in
  the reply, ``id`` is unique (``call_...``), ``name`` is the function's name.
- ``ToolCallArgsDelta(index, fragment)``: the next piece of that call's arguments, JSON text;
  the concatenation of a call's fragments is one JSON object.
- ``ToolCallEnd(index, complete)``: the call is over; ``complete``: its arguments parse (False
  only when the reply was cut inside a call whose start was already sent).

A call's Start comes before its ArgsDeltas and its End; calls do not interleave. Text may
come before and (rarely) between calls. A call whose body is JSON (``"name": ..., "arguments":
{...}``, as most families write it) is sent as it is written: its Start once its name is known,
then the raw JSON text of its arguments as the tokens come (what agents show while a long file is
being written), its End when the arguments close; other calls are sent whole when their markup
ends. :class:`OutputParser` is fed text as the engine
produces it, chunked anywhere (a chunk may end inside a marker); it holds back only what could
still be the start of markup. ``finish()`` flushes the rest: an unterminated call whose JSON
still parses is completed, otherwise its text is returned as answer text (nothing is lost).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

from runtime.server.generate.tool_formats import JsonEnd, ToolFormat


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
    complete: bool = True


Event = TextDelta | ReasoningDelta | ToolCallStart | ToolCallArgsDelta | ToolCallEnd


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


#: where a call's arguments begin, from where the previous call's ended (or the body's start):
#: list and wrapper punctuation, then ``"name": "...", "arguments": `` before an object
_HEADER = re.compile(r'(?:\s|[\[\]{},]|"tool_calls"\s*:)*"name"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*'
                     r'"(?:arguments|parameters)"\s*:\s*(?=\{)')


@dataclass(slots=True)
class _Streaming:
    """The call being sent as it is written."""

    index: int
    id: str
    name: str
    start: int  # where its arguments begin in the call's buffer
    sent: int  # how far they have been sent
    scan: JsonEnd


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
        # the call markup being read: calls already sent from it, the one being sent, where to look next
        self._sent_calls = 0
        self._current: _Streaming | None = None
        self._scan_from: int | None = 0

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
        assert self.think is not None  # the parser starts here only for a reasoning template
        opening = self.think[0]
        stripped = self.buf.lstrip()
        if stripped.startswith(opening):
            self.buf = stripped[len(opening):]
            self.state = "reasoning"
        elif final or not opening.startswith(stripped):
            self.state = "text"

    def _reasoning(self, out: list[Event], final: bool) -> None:
        assert self.think is not None  # inside a thinking block: the template has one
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
        """Inside a call's markup: send the calls whose arguments are JSON as they are written;
        when the markup ends, send the calls it holds that were not sent yet."""
        self._stream_calls(out)
        assert self.fmt is not None  # inside a call's markup: the plan has a tool format
        body, rest = self.fmt.split_body(self.buf, final)
        if body is None:
            if final:  # cut off inside the call
                if self._current is not None:
                    out.append(ToolCallEnd(self._current.index, complete=False))
                elif not self._sent_calls:  # keep its text rather than lose it
                    out.append(TextDelta(self._marker + self.buf))
                self._end_markup("")
            return
        if self._current is not None:  # the markup closed around arguments that never did
            out.append(ToolCallEnd(self._current.index, complete=False))
            self._current = None
        calls = self.fmt.parse_body(body)
        sent = self._sent_calls
        if calls is not None:
            calls = calls[sent:]
            if self.accept is not None and not all(self.accept(n, a) for n, a in calls):
                calls = None
        if calls is None:
            if not sent:
                out.append(TextDelta(self._marker + body))
        else:
            for name, args in calls:
                i = self._open
                self._open += 1
                cid = new_call_id()
                text = json.dumps(args, ensure_ascii=False)
                self.calls.append({"id": cid, "name": name, "arguments": text})
                out += [ToolCallStart(i, cid, name), ToolCallArgsDelta(i, text), ToolCallEnd(i)]
        self._end_markup(rest)

    def _end_markup(self, rest: str) -> None:
        self.buf = rest
        self.state = "text"
        self._sent_calls, self._current, self._scan_from = 0, None, 0

    def _stream_calls(self, out: list[Event]) -> None:
        """Send what can be sent of the calls in the markup read so far (``self.buf``)."""
        buf = self.buf
        while True:
            cur = self._current
            if cur is None:
                if self._scan_from is None:
                    return  # a call here is not one to send as it comes: the markup's end decides
                m = _HEADER.match(buf, self._scan_from)
                if m is None:
                    if len(buf) - self._scan_from > 4096:  # not the header of a call: stop looking
                        self._scan_from = None
                    return
                try:
                    name = json.loads(f'"{m.group(1)}"')
                except ValueError:
                    name = None
                if not isinstance(name, str) or (self.accept is not None and not self.accept(name, {})):
                    self._scan_from = None
                    return
                i = self._open
                self._open += 1
                cur = self._current = _Streaming(i, new_call_id(), name, m.end(), m.end(), JsonEnd(m.end()))
                out.append(ToolCallStart(i, cur.id, name))
            end = cur.scan.end(buf)
            upto = end if end is not None else len(buf)
            if upto > cur.sent:
                out.append(ToolCallArgsDelta(cur.index, buf[cur.sent:upto]))
                cur.sent = upto
            if end is None:
                return
            raw = buf[cur.start:end]
            try:
                args = json.loads(raw)
            except (ValueError, RecursionError):
                args = None
            complete = isinstance(args, dict)
            if complete:
                self.calls.append({"id": cur.id, "name": cur.name, "arguments": raw})
            out.append(ToolCallEnd(cur.index, complete))
            self._sent_calls += 1
            self._current, self._scan_from = None, end


def parse_all(text: str, fmt: ToolFormat | None, think: tuple[str, str] | None = None,
              in_reasoning: bool = False, accept=None) -> tuple[str, str, list[dict]]:
    """A whole reply: (answer text, reasoning text, calls)."""
    p = OutputParser(fmt, think, in_reasoning, accept)
    events = p.feed(text) + p.finish()
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    return answer, reasoning, p.calls
