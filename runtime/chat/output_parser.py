"""A model's raw output as typed events (``events``), read by the model's output contract.

:class:`OutputParser` is fed text as the engine produces it, chunked anywhere (a chunk may end
inside a marker); it holds back only what could still be the start of markup. Reasoning is sent
as it comes; a call's Start once its name is known, its arguments as they are written (JSON text
that only grows: the raw JSON of a JSON body, or the values of tagged arguments as each closes),
its End when the call closes. ``finish()`` flushes the rest: a call cut off whose start was sent
ends incomplete; markup that never became a call is returned as answer text (nothing is lost).
"""

from __future__ import annotations

from collections.abc import Callable

from runtime.chat.call_reader import CallReader, Section
from runtime.chat.channels import ChannelHeaders
from runtime.chat.contract import CallSyntax, OutputContract
from runtime.chat.text_diff import MARKER
from runtime.chat.events import (
    Event, ReasoningDelta, TextDelta, ToolCallArgsDelta, ToolCallEnd, ToolCallStart, new_call_id,
)

Accept = Callable[[str, dict], bool]


def held(buf: str, marker: str) -> int:
    """How many trailing characters of ``buf`` could begin ``marker``."""
    for n in range(min(len(marker) - 1, len(buf)), 0, -1):
        if marker.startswith(buf[-n:]):
            return n
    return 0


class OutputParser:
    """Splits one choice's output into events. ``contract``: the model's; ``tools``: the tools
    offered (None: calls are not read); ``in_reasoning``: the prompt opened the thinking block;
    ``accept(name, arguments)``: a call that fails it is returned as text."""

    def __init__(self, contract: OutputContract | None, tools: list[dict] | None = None,
                 in_reasoning: bool = False, accept: Accept | None = None, inline_reasoning: bool = False) -> None:
        contract = contract or OutputContract()
        #: thinking stays in the answer text, markers included (llama-server's reasoning format "none")
        self.inline = inline_reasoning
        self.contract = contract
        self.accept = accept
        r = contract.reasoning
        self.think = (r.start.strip(), r.end.strip()) if r is not None and r.end.strip() else None
        calls = contract.calls if tools else None
        schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools or []}
        self.reader = CallReader(calls, schemas) if calls is not None else None
        self.triggers = self.reader.triggers() if self.reader is not None else []
        self.strip = [m.strip() for m in (contract.content_end, *contract.noise) if m.strip()]
        #: the answer is written between markers (gpt-oss's final channel): short markup outside
        #: them (channel headers) is not answer text
        self.opening = contract.content_start.strip()
        #: other channels' headers where the answer's marker is a channel's (gpt-oss)
        self.channels = self._channels(contract, calls) if self.opening else None
        self._in_content = False
        #: the template writes whitespace after the answer's marker (Functionary's ``>>>all\n``)
        self._open_ws = contract.content_start != contract.content_start.rstrip()
        #: whitespace after a marker that ends a part is dropped, however the text is chunked
        self._lstrip = False
        self._fresh = True
        self.buf = ""
        self.state = "reasoning" if (self.think and in_reasoning) else "text"
        #: what the prompt wrote of the thinking block, which inline thinking begins with
        self._seed = (r.opening or r.start) if self.state == "reasoning" and self.inline and r is not None else ""
        self.buf = self._seed
        #: the seed is still unsent at the buffer's start (see ``_holding``)
        self._seed_held = bool(self._seed)
        if self.state == "reasoning" and not self.inline and r is not None and r.opening.strip() \
                and not MARKER.search(r.opening):
            self.buf = r.opening.lstrip()  # the prompt began the thinking in words: they are its text
        #: the prompt's tail the reply goes on from (Functionary's ``>>>``), while the buffer
        #: starts with it and no marker has taken it
        self._tail = contract.prompt_tail if self.state == "text" else ""
        self._seeded = False
        if self._tail:
            self.state = "head"
        self.calls: list[dict] = []  # {"id", "name", "arguments"} of the complete calls
        self._n = 0  # calls started in the reply
        self._entry = ""
        self._sent: list[tuple[int, str, int, bool]] = []  # this section's calls: index, id, args sent, ended

    def _channels(self, contract: OutputContract, calls: CallSyntax | None) -> ChannelHeaders | None:
        triggers = [t for t, _ in self.triggers]
        ends = [self.think[1]] if self.think else []
        ends += [contract.content_end] + ([calls.close, calls.call_end, calls.section_end] if calls is not None else [])
        headers = ChannelHeaders(self.opening, [*(self.think or ()), self.opening, *triggers], triggers, ends)
        return headers if headers.ok else None

    # -- feeding --------------------------------------------------------------------------
    def feed(self, text: str) -> list[Event]:
        self.buf += text
        out: list[Event] = []
        while True:
            before = (self.state, len(self.buf))
            getattr(self, f"_{self.state}")(out, False)
            if (self.state, len(self.buf)) == before:
                return out

    def finish(self) -> list[Event]:
        out: list[Event] = []
        for _ in range(64):
            getattr(self, f"_{self.state}")(out, True)
            if not self.buf and self.state != "calls":
                break
        if self.buf:
            out.append(self._thought(self.buf) if self.state == "reasoning" else TextDelta(self.buf))
            self.buf = ""
        return out

    # -- states -----------------------------------------------------------------------------
    def _head(self, out: list[Event], final: bool) -> None:
        """The start of a reply that goes on from the prompt's tail: a marker that begins with
        the tail (the answer's ``>>>all``, a call's ``>>>``) is read with it; other text is the
        reply's own, and the tail is never answer text."""
        seeded = self._tail + self.buf
        found = [m for m, _ in self._markers() if m.startswith(self._tail)]
        if not final and any(len(m) > len(seeded) and m.startswith(seeded) for m in found):
            return  # not known yet
        self.state = "text"
        if any(seeded.startswith(m) for m in found):
            self.buf = seeded
            self._seeded = True

    def _drop_leading_space(self) -> bool:
        """Whether to wait: only whitespace has come since a part ended."""
        if self._lstrip:
            self.buf = self.buf.lstrip()
            if not self.buf:
                return True
            self._lstrip = False
        return False

    def _reasoning(self, out: list[Event], final: bool) -> None:
        assert self.think is not None  # only entered with reasoning markers
        if self._drop_leading_space():
            return
        if self._fresh and self.opening:
            # a reply that skips the thinking the prompt opened, straight to its answer's marker
            seed = self.buf[:len(self._seed)] if self.inline and self.buf.startswith(self._seed) else ""
            head = self.buf[len(seed):].lstrip()
            if head.startswith(self.opening):
                self.buf = head
                self.state = "text"
                return
            if self.opening.startswith(head) and not final:
                return
            self._fresh = False
        closing = self.think[1]
        at = self.buf.find(closing)
        call = min(((self.buf.find(t), t, e) for t, e in self.triggers if t in self.buf), default=None)
        if call is not None and (at < 0 or call[0] < at):
            ends = self._calls_end_thinking(call[0], final)
            if ends is None:  # not known yet: the thinking so far, and the calls wait
                if call[0] and not self._holding():
                    out.append(self._thought(self.buf[:call[0]]))
                    self.buf = self.buf[call[0]:]
                return
            if ends:  # calls never followed by the closing marker end the thinking
                lead = len(self._seed) if self._holding() else 0  # an opening never closed is not shown
                if call[0] > lead:
                    out.append(self._thought(self.buf[lead:call[0]]))
                self.buf = self.buf[call[0]:]
                self._seed_held = False
                self.state = "text"
                return
            # calls the thinking is closed after are its text (it quotes them)
            end = call[0] + len(call[1])
            self._seed_held = False
            out.append(self._thought(self.buf[:end]))
            self.buf = self.buf[end:]
            return
        if at >= 0:
            self._seed_held = False
            if at or self.inline:
                out.append(self._thought(self.buf[:at + (len(closing) if self.inline else 0)]))
            self.buf = self.buf[at + len(closing):]
            self._lstrip = not self.inline
            self.state = "text"
            return
        keep = 0 if final else max([held(self.buf, closing)] + [held(self.buf, t) for t, _ in self.triggers])
        if not final and self._holding():
            return
        if len(self.buf) > keep:
            self._seed_held = False
            out.append(self._thought(self.buf[:len(self.buf) - keep]))
            self.buf = self.buf[len(self.buf) - keep:]

    def _holding(self) -> bool:
        """Inline thinking that the prompt opened is shown with the prompt's opening where it
        closes; where a call ends it instead (never closed), it is answer text without the
        opening (as llama.cpp reads Ling 3.0 with reasoning format "none"). While tools are
        offered, so that a call may end it, none of it is sent until that is known."""
        return self._seed_held and bool(self.triggers) and self.buf.startswith(self._seed)

    def _calls_end_thinking(self, at: int, final: bool) -> bool | None:
        """Whether the calls written at ``at`` inside the thinking end it: the thinking is never
        closed after them (Qwen3.5, Ling, Kimi K2 Thinking). Where its closing marker comes later,
        the calls are text the thinking quotes (as llama.cpp reads Ministral, LFM2.5 and Reka).
        None: not known until the closing marker or the end of the reply comes."""
        assert self.think is not None  # only with thinking markers
        if self.buf.find(self.think[1], at) >= 0:
            return False
        return True if final else None

    def _thought(self, text: str) -> Event:
        return TextDelta(text) if self.inline else ReasoningDelta(text)

    def _markers(self) -> list[tuple[str, str]]:
        found = [(t, "call:" + e) for t, e in self.triggers]
        if self.think is not None and self.think[0]:
            found.append((self.think[0], "think"))
        found += [(m, "strip") for m in self.strip]
        if self.think is not None and not self.inline and MARKER.fullmatch(self.think[1]):
            found.append((self.think[1], "strip"))  # a stray end of thinking in the answer (Gemma 4)
        if self.opening:
            found.append((self.opening, "open"))
        return found

    def _text(self, out: list[Event], final: bool) -> None:
        if self._drop_leading_space():
            return
        if self._fresh and self.think is not None and not self.inline:
            # a reply that opens by closing the thinking (empty, or opened where the prompt does
            # not show it: MiniMax M3's ``</mm:think>`` prefix)
            head = self.buf.lstrip()
            if head.startswith(self.think[1]):
                self.buf = head[len(self.think[1]):]
                self._lstrip = True
                self._fresh = False
                return
            if self.think[1].startswith(head) and not final:
                return
        self._fresh = False
        if self.channels is not None and not self._in_content:
            header = self.channels.at(self.buf, final)
            if header is not None:
                if header.kind == "wait":
                    return
                self.buf = self.buf[header.end:]
                self._in_content = header.kind == "content"
                return
        best: tuple[int, int, str, str] | None = None  # (at, -len, marker, kind)
        for marker, kind in self._markers():
            at = self.buf.find(marker)
            if at >= 0 and (best is None or (at, -len(marker)) < best[:2]):
                best = (at, -len(marker), marker, kind)
        if best is not None:
            at, _, marker, kind = best
            if not final and any(len(m) > len(self.buf) - at and m.startswith(self.buf[at:]) for m, _ in self._markers()):
                return  # a longer marker may start there (``to=user<|message|>`` where ``to=`` starts a call)
            if not kind.startswith("call:"):
                self._seeded = False
            stutter = kind == "think" and self.buf[:at].strip() and marker.startswith(self.buf[:at].strip())
            if at and not self._outside(self.buf[:at]) and not stutter:  # (Gemma 4's <|channel><|channel>thought)
                out.append(TextDelta(self.buf[:at]))
            if kind == "open":
                self._in_content = True
                self.buf = self.buf[at + len(marker):]
                self._lstrip = self._open_ws
            elif kind == "think":
                if self.inline:
                    out.append(TextDelta(marker))
                    self.buf = self.buf[at + len(marker):]
                else:
                    self.buf = self.buf[at + len(marker):]
                    self._lstrip = True
                self.state = "reasoning"
            elif kind == "strip":
                self._in_content = False
                self.buf = self.buf[at + len(marker):]
            else:
                self.buf = self.buf[at:]
                self._entry = kind[5:]
                self._sent = []
                assert self.reader is not None  # call triggers come from the reader
                self.reader.reset()
                self.state = "calls"
            return
        if final and self.calls and not self.buf.strip():
            self.buf = ""  # whitespace after the last call
            return
        if not final and self._outside(self.buf):
            return  # markup between parts of a wrapped answer is dropped once its marker comes
        if final and self._outside(self.buf) and not MARKER.sub("", self.buf).strip():
            self.buf = ""  # markup after a wrapped answer (Kimi K3's ``<|close|>message<|sep|>``)
            return
        keep = 0 if final else max((held(self.buf, m) for m, _ in self._markers()), default=0)
        if not final and self.think is not None and self.think[0] and 0 < keep < len(self.buf):
            lead = self.buf[:len(self.buf) - keep].strip()
            if lead and self.think[0].startswith(lead):
                keep = len(self.buf)  # maybe a stutter of the thinking's opening marker
        n = len(self.buf) - keep
        if n > 0:
            out.append(TextDelta(self.buf[:n]))
            self.buf = self.buf[n:]

    def _outside(self, text: str) -> bool:
        """Markup between the parts of a reply whose answer is wrapped: dropped."""
        return bool(self.opening) and not self._in_content and len(text) <= 100

    def _calls(self, out: list[Event], final: bool) -> None:
        assert self.reader is not None  # only entered at a call trigger
        section = self.reader.read(self.buf, self._entry, final)
        if section.bad or not self._accepted(section):
            if not self._sent and self._seeded:  # not a call: the prompt's tail is not text
                self.buf = self.buf[len(self._tail):]
                self._seeded = False
                self.state = "text"
                return
            if not self._sent:  # not a call: its first character is text, the rest is read again
                out.append(TextDelta(self.buf[:1]))
                self.buf = self.buf[1:]
                self.state = "text"
                return
            section.end = len(self.buf) if section.end is None else section.end
        self._send(section, out, final)
        if section.end is None and not final:
            return
        for i, (index, cid, n, ended) in enumerate(self._sent):
            if not ended:  # cut off inside its arguments
                out.append(ToolCallEnd(index, complete=False))
                self._sent[i] = (index, cid, n, True)
        self.buf = self.buf[section.end:] if section.end is not None else ""
        self._seeded = False
        self._lstrip = bool(self.calls)
        self.state = "text"

    def _accepted(self, section: Section) -> bool:
        if self.accept is None:
            return True
        return all(self.accept(c.name, {}) for c in section.calls)

    def _send(self, section: Section, out: list[Event], final: bool) -> None:
        for i, call in enumerate(section.calls):
            if i == len(self._sent):
                cid = call.id or new_call_id()
                self._sent.append((self._n, cid, 0, False))
                out.append(ToolCallStart(self._n, cid, call.name))
                self._n += 1
            index, cid, sent, ended = self._sent[i]
            if ended:
                continue
            if len(call.args) > sent:
                out.append(ToolCallArgsDelta(index, call.args[sent:]))
                sent = len(call.args)
            if call.done:
                out.append(ToolCallEnd(index))
                self.calls.append({"id": cid, "name": call.name, "arguments": call.args})
                ended = True
            self._sent[i] = (index, cid, sent, ended)


def parse_all(text: str, contract: OutputContract | None, tools: list[dict] | None = None,
              in_reasoning: bool = False, accept: Accept | None = None,
              inline_reasoning: bool = False) -> tuple[str, str, list[dict]]:
    """A whole reply: (answer text, reasoning text, calls)."""
    p = OutputParser(contract, tools, in_reasoning, accept, inline_reasoning)
    events = p.feed(text) + p.finish()
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    return answer, reasoning, p.calls
