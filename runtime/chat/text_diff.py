"""Text differences between two renders of a template, cut at marker boundaries.

Rendering the same conversation twice, once with a part (a tool call, a reasoning block) and once
without, and keeping what differs isolates how the template writes that part. A character-level
common prefix can end inside a marker (``<|START_ACTION|>`` against ``<|START_RESPONSE|>``
share ``<|START_``): the cut is moved back to the marker's start, so markers stay whole.
"""

from __future__ import annotations

import re

#: special-token-like markup: ``<|x|>``, ``<x>``, ``</x>``, ``<｜x｜>``, ``[X]``, ``<|x>``, ``<x|>``
MARKER = re.compile(r"<\|\w{1,16}\|>\w{1,24}<\|\w{1,16}\|>(?!\w+<\|)|<[|｜]?/?[\w:.\-=\"' ▁|｜]{1,48}[|｜]?>|\[/?[A-Z_]{2,32}\]|\[[A-Z]+(?: [A-Z]+){1,4}\]|\]<\]\w+\[>\[")


def common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def common_suffix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[-1 - i] == b[-1 - i]:
        i += 1
    return i


def _widen_left(text: str, at: int) -> int:
    for m in MARKER.finditer(text, max(0, at - 64), min(len(text), at + 64)):
        if m.start() < at < m.end():
            return m.start()
    return at


def _widen_right(text: str, at: int) -> int:
    for m in MARKER.finditer(text, max(0, at - 64), min(len(text), at + 64)):
        if m.start() < at < m.end():
            return m.end()
    return at


#: a word that names what follows it (``to=`` of Muse Glimmer's ``to=self``, ``to=NAME``)
_NAMING = re.compile(r"[A-Za-z_][\w.]*=$")


def _widen_to_word(text: str, at: int) -> int:
    """``at``, or the start of the ``key=`` word it cuts: two renders that address a message
    to different recipients (``to=user`` against ``to=self``) differ after ``to=``, and the
    word is the start of the part that differs, as a marker is."""
    if 0 < at < len(text) and (text[at].isalnum() or text[at] == "_"):
        m = _NAMING.search(text, max(0, at - 24), at)
        if m is not None and (m.start() == 0 or text[m.start() - 1].isspace()):
            return m.start()
    return at


def diff(a: str, b: str) -> tuple[int, str, int]:
    """(where the difference starts in ``b``, what ``b`` has there, where it ends in ``b``), the
    bounds widened so that no marker of ``b`` is cut, nor a ``key=`` word before it."""
    start = common_prefix(a, b)
    end = len(b) - common_suffix(a[start:], b[start:])
    start = _widen_to_word(b, _widen_left(b, start))
    end = max(start, _widen_right(b, end))
    return start, b[start:end], end


def lcp(a: str, b: str) -> str:
    """The longest common prefix of two strings that cuts no marker of either."""
    n = common_prefix(a, b)
    n = min(_snap_left(a, n), _snap_left(b, n))
    return a[:n]


def lcs(a: str, b: str) -> str:
    """The longest common suffix of two strings that cuts no marker of either."""
    n = common_suffix(a, b)
    if not n:
        return ""
    n = min(len(a) - _snap_right(a, len(a) - n), len(b) - _snap_right(b, len(b) - n))
    return a[len(a) - n:] if n else ""


def _snap_left(text: str, at: int) -> int:
    """``at``, or the start of the marker it falls inside."""
    return _widen_left(text, at)


def _snap_right(text: str, at: int) -> int:
    """``at``, or the end of the marker it falls inside."""
    return _widen_right(text, at)


def markers(text: str) -> list[str]:
    return MARKER.findall(text)


def last_marker(text: str) -> re.Match | None:
    found = None
    for m in MARKER.finditer(text):
        found = m
    return found
