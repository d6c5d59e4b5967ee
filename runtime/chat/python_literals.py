"""Python literals as a model writes them in a Python-style call (``toggle(enabled=True)``,
``set(config={"on": True, "n": 3})``, ``run(code='print("hi")')``), read into JSON values.

The leaves are Python's (strings in either quote with their escapes, ``True``/``False``/``None``,
numbers) or JSON's (``true``/``false``/``null``), as llama.cpp's ``python_or_json_value`` reads
them; lists, tuples and dicts hold them. Nothing is evaluated.
"""

from __future__ import annotations

import json
import re

_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d*)?")
_WORD = re.compile(r"[A-Za-z_]\w*")
_WORDS = {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "0": "\0", "\\": "\\", "'": "'", '"': '"',
            "\n": "", "a": "\a", "v": "\v"}
_CLOSE = {"[": "]", "(": ")", "{": "}"}


class Incomplete(Exception):
    """The text ends inside the value (more may come)."""


class NotLiteral(Exception):
    """The text is not a literal."""


def _ws(text: str, p: int) -> int:
    while p < len(text) and text[p].isspace():
        p += 1
    return p


def python_value(text: str, p: int, final: bool = True) -> tuple[int, object]:
    """(the end, the value) of the literal at ``p``. Raises ``Incomplete`` where the text ends
    inside it (a number at the very end counts while more may come: ``final`` False), and
    ``NotLiteral`` where it is something else."""
    if p >= len(text):
        raise Incomplete
    ch = text[p]
    if ch in "\"'":
        return _string(text, p)
    if ch in _CLOSE:
        return _container(text, p, final)
    m = _NUMBER.match(text, p)
    if m is not None:
        if m.end() == len(text) and not final:
            raise Incomplete  # 3 of 3.14, 2e of 2e5
        raw = m.group()
        try:
            return m.end(), float(raw) if any(c in raw for c in ".eE") else int(raw)
        except ValueError:  # an exponent without digits
            raise NotLiteral from None
    if text[p] == "-" and p + 1 == len(text) and not final:
        raise Incomplete
    m = _WORD.match(text, p)
    if m is not None:
        if m.end() == len(text) and not final and any(w.startswith(m.group()) for w in _WORDS):
            raise Incomplete
        if m.group() in _WORDS:
            return m.end(), _WORDS[m.group()]
    if not final and any(w.startswith(text[p:]) for w in _WORDS):
        raise Incomplete
    raise NotLiteral


def _string(text: str, p: int) -> tuple[int, str]:
    quote = text[p]
    out: list[str] = []
    i = p + 1
    while i < len(text):
        ch = text[i]
        if ch == quote:
            return i + 1, "".join(out)
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        if i + 1 >= len(text):
            raise Incomplete
        nxt = text[i + 1]
        if nxt in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[nxt]
            digits = text[i + 2:i + 2 + width]
            if len(digits) < width:
                raise Incomplete
            try:
                out.append(chr(int(digits, 16)))
            except ValueError:
                raise NotLiteral from None
            i += 2 + width
            continue
        out.append(_ESCAPES.get(nxt, "\\" + nxt))  # an unknown escape stays as written, as in Python
        i += 2
    raise Incomplete


def _container(text: str, p: int, final: bool) -> tuple[int, object]:
    opener = text[p]
    close = _CLOSE[opener]
    items: list = []
    pairs: dict = {}
    i = _ws(text, p + 1)
    first = True
    while True:
        if i >= len(text):
            raise Incomplete
        if text[i] == close:
            return i + 1, pairs if opener == "{" else items
        if not first:
            if text[i] != ",":
                raise NotLiteral
            i = _ws(text, i + 1)
            if i >= len(text):
                raise Incomplete
            if text[i] == close:  # a trailing comma
                return i + 1, pairs if opener == "{" else items
        first = False
        i, value = python_value(text, i, final=False)
        i = _ws(text, i)
        if opener != "{":
            items.append(value)
            continue
        if not isinstance(value, str):
            raise NotLiteral  # JSON objects have string keys
        if i >= len(text):
            raise Incomplete
        if text[i] != ":":
            raise NotLiteral
        i, pairs[value] = python_value(text, _ws(text, i + 1), final=False)
        i = _ws(text, i)


def python_text(value: object, quote: str = '"') -> str:
    """``value`` written as a Python literal (strings in ``quote``)."""
    if isinstance(value, str):
        body = json.dumps(value, ensure_ascii=False)[1:-1]
        if quote == "'":
            body = body.replace('\\"', '"').replace("'", "\\'")
        return f"{quote}{body}{quote}"
    if value is True or value is False or value is None:
        return {True: "True", False: "False", None: "None"}[value]
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{python_text(str(k), quote)}: {python_text(v, quote)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(python_text(v, quote) for v in value) + "]"
    return python_text(str(value), quote)
