"""Message headers of a model whose answer is written in a channel (gpt-oss's harmony format:
``<|channel|>final<|message|>``), read from the contract's answer marker.

The answer's marker is a frame (``<|channel|>`` ... ``<|message|>``) around a channel's name.
Headers in the same frame name other channels: one without a recipient is answer text too
(gpt-oss's ``commentary`` preamble); one addressed to a recipient that is not a function the
client offered (``to=python``, ``to=container.exec``: the model's built-in tools) is a message
for a tool the service does not run, dropped to its end, as llama.cpp drops it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runtime.chat.text_diff import MARKER


@dataclass(slots=True, frozen=True)
class Header:
    """What the text at the start of the buffer is: ``kind`` "content" (a header to drop, the
    answer follows), "drop" (a built-in tool's message: ``end`` is where it ends) or "wait"
    (more text decides); ``end``: how much of the buffer it takes."""

    kind: str
    end: int = 0


class ChannelHeaders:
    def __init__(self, opening: str, known: list[str], calls: list[str], ends: list[str]) -> None:
        """``opening``: the answer's marker; ``known``: markers the parser reads itself (the
        thinking's, the answer's); ``calls``: where calls start (a recipient a call trigger
        names is a function call); ``ends``: markers that end a message."""
        m = re.fullmatch(r"(?P<open>.+?)(?P<name>\w+)(?P<close>" + MARKER.pattern + ")", opening)
        self.ok = m is not None and MARKER.fullmatch(m.group("open")) is not None
        self._open = m.group("open") if m is not None else ""
        self._close = m.group("close") if m is not None else ""
        # a header holds no other header's start (a model may write a broken one before a whole one)
        self._header = re.compile(r"\s*(?:to=(?P<to>\S+?)\s*)?" + re.escape(self._open) + r"(?P<name>\w+)(?P<rest>(?:(?!"
                                  + re.escape(self._open) + r")[^\n])*?)" + re.escape(self._close)) if self.ok else None
        self._known = [k.strip() for k in known if k.strip()]
        self._calls = [c.strip() for c in calls if c.strip()]
        self._ends = [e.strip() for e in ends if e.strip()]

    def at(self, buf: str, final: bool) -> Header | None:
        """The header at the start of ``buf`` (None: none there; the parser goes on as usual)."""
        if self._header is None:
            return None
        m = self._header.match(buf)
        if m is None:
            return Header("wait") if not final and self._may_become_one(buf.lstrip()) else None
        header = buf[buf.find(self._open, m.start()):m.end()].strip()
        if any(header == k or k.startswith(header) or header.startswith(k) for k in self._known) and not m.group("to"):
            return None  # the thinking's, the answer's or the calls' own marker
        to = m.group("to") or _recipient(m.group("rest"))
        if to is None:
            return Header("content", m.end())
        if any(f"to={to}".startswith(c) or c.endswith(f"to={to.split('.')[0]}.") for c in self._calls):
            return None  # a function call: the call reader takes it
        ends = [(buf.find(e, m.end()), e) for e in self._ends]
        found = min(((i, e) for i, e in ends if i >= 0), default=None)
        if found is None:
            return Header("drop", len(buf)) if final else Header("wait")
        return Header("drop", found[0] + len(found[1]))


    def _may_become_one(self, head: str) -> bool:
        """``head`` is the start of a header whose end has not come yet."""
        if not head or "\n" in head or len(head) > 200 or self._close in head:
            return False
        if len(head) < len(self._open):
            return self._open.startswith(head) or "to=".startswith(head[:3])
        body = head.split(self._open, 1)
        if head.startswith(self._open):
            return self._open not in body[1]
        return head.startswith("to=") and len(body) == 2 and self._open not in body[1]


def _recipient(rest: str) -> str | None:
    m = re.search(r"\bto=(\S+)", rest)
    return m.group(1) if m is not None else None
