"""The one validator of request bodies, shared by every wire format (OpenAI, Ollama, ...).

Each helper reads one field of a JSON object and returns a typed value, or raises a 400
(``bad_request``) that names the field by its full path (``options.top_k``,
``messages[2].content[0].text``). The allowed ranges of the sampling options are the
engine's own table (``SamplingParams``' ``LIMITS``), so the service refuses exactly what the
worker would, with a better message, before anything crosses into the worker.

``read_json`` turns a body into a value, refusing any shape of malformed JSON with a 400:
invalid syntax or UTF-8, ``NaN``/``Infinity`` literals, integers of more than
``MAX_INT_DIGITS`` digits, nesting deeper than ``MAX_DEPTH``, more than ``MAX_CONTAINERS``
arrays and objects (and ``MAX_STRINGS`` strings, ``MAX_VALUES`` values), and strings (keys
included) with lone surrogates (``"\\ud800"`` is valid
JSON but not text). JSON inside a string (a tool call's ``arguments``, a schema sent as text)
gets the same limits through :func:`json_field`.

Parsing is linear in the body, but Python's JSON parser holds the interpreter lock while it
runs in C (a thread does not let the event loop run meanwhile), and building an object per
``[]`` costs about 0.3 us: so the number of arrays and objects is capped *before* parsing (a
count of the bytes ``[`` and ``{``, checked outside strings when it is over), numbers are built
by Python functions (where the lock can change hands), and a body over ``THREAD_BYTES`` is
parsed and walked in a thread, where the walk (Python code) lets the loop answer ``/health``.
Those threads parse one body at a time (``_ONE_BIG_BODY``): seven 1.7 MB bodies parsed at once
held the interpreter lock back to back, each for its C parse, and ``/health`` waited for them all.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import threading
from contextlib import contextmanager
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from aiohttp import web

from runtime.sampling_params import LIMITS, MAX_STOP_CHARS, MAX_STOPS, utf8_ok
from runtime.server.bodies import received
from runtime.server.errors import bad_request
from runtime.server.media_input import MediaInput

T = TypeVar("T")

MAX_DEPTH = 64
MAX_INT_DIGITS = 40
#: what the JSON parser builds in C, holding the interpreter lock throughout, in one body or
#: one JSON text: arrays and objects (about 15 ms), strings (keys included; about 20 ms), and
#: values of any kind (numbers are built by Python functions, where the lock can move, but a
#: million of them still take a quarter of a second to build and to free)
MAX_CONTAINERS = 50_000
MAX_STRINGS = 250_000
MAX_VALUES = 500_000
CAPS = (MAX_CONTAINERS, MAX_STRINGS, MAX_VALUES)
#: a body larger than this is parsed and checked in a thread
THREAD_BYTES = 64 * 1024
#: token ids in one prompt (more than any local model's context holds)
MAX_TOKEN_IDS = 256 * 1024
#: one message's or prompt's text, in characters (the body limit bounds the sum)
MAX_TEXT_CHARS = 4 * 1024 * 1024


# -- the body ------------------------------------------------------------------------------
def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits (at most {MAX_INT_DIGITS} are accepted)")
    return int(text)


def _parse_float(text: str) -> float:
    """A Python function, not ``float`` itself: the parser calls it through the interpreter,
    which can then hand the lock to the event loop (a million floats take 0.4 s to parse)."""
    return float(text)


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def loads(raw: bytes | bytearray | str) -> Any:
    """A JSON body as a value; ``bad_request`` for anything malformed (see the module doc)."""
    try:
        value = _parse(raw, exact=True)
    except RecursionError:
        raise bad_request(f"the request body is nested too deeply (at most {MAX_DEPTH} levels)") from None
    except TooManyContainers as e:
        raise bad_request(f"the request body holds {e}") from None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        raise bad_request(f"the request body is not valid JSON: {e}") from None
    check_tree(value)
    return value


class TooManyContainers(ValueError):
    """More arrays and objects, strings or literals than the caps (counted before parsing)."""


def _parse(raw: bytes | bytearray | str, exact: bool = False) -> Any:
    """``json.loads`` with the limits. Arrays and objects, strings and values (one per comma,
    and one per container) are counted first by byte counts, which are exact unless strings
    hold brackets, quotes or commas; ``exact``: when a count is over its cap, count again
    outside strings (a loop per string, for a thread)."""
    counts = _upper_bounds(raw)
    if exact and not _within(counts):
        counts = _outside_strings(raw)
    if not _within(counts):
        over = [f"{n} {what} (at most {cap})" for n, cap, what in zip(counts, CAPS, ("arrays and objects", "strings",
                                                                                 "values")) if n > cap]
        raise TooManyContainers(", ".join(over))
    if counts[0] < 1000:
        return json.loads(raw, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_refuse_constant)
    with _collector_paused():
        return json.loads(raw, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_refuse_constant)


def _within(counts: tuple[int, int, int] | tuple[int, ...]) -> bool:
    return all(n <= cap for n, cap in zip(counts, CAPS))


def _upper_bounds(raw: Any) -> tuple[int, int, int]:  # bytes, bytearray or str: the same methods
    b = isinstance(raw, (bytes, bytearray))
    containers = raw.count(b"[" if b else "[") + raw.count(b"{" if b else "{")
    strings = raw.count(b'"' if b else '"') // 2
    return containers, strings, containers + raw.count(b"," if b else ",")


_paused = 0
_paused_lock = threading.Lock()


@contextmanager
def _collector_paused():
    """The cyclic garbage collector off while many containers are built: its passes (a full one
    walks every object of the service) would run inside the parse, holding the interpreter lock
    (350,000 ``[]`` parse in 110 ms with it, 47 ms without). Parses in other threads share it."""
    global _paused
    with _paused_lock:
        _paused += 1
        gc.disable()
    try:
        yield
    finally:
        with _paused_lock:
            _paused -= 1
            if not _paused:
                gc.enable()


def _outside_strings(raw: Any) -> tuple[int, int, int]:  # bytes, bytearray or str: the same methods
    """Arrays and objects, strings and values outside strings, up to just past a cap: the search
    for each string's end (a quote after an even run of backslashes) is done by ``find``."""
    b = isinstance(raw, (bytes, bytearray))
    quote, slash = (b'"', b"\\") if b else ('"', "\\")
    marks = [c.encode() if b else c for c in "[{,"]
    containers = strings = commas = 0
    i, end = 0, len(raw)
    while i < end and _within((containers, strings, containers + commas)):
        q = raw.find(quote, i)
        stop = end if q < 0 else q
        containers += raw.count(marks[0], i, stop) + raw.count(marks[1], i, stop)
        commas += raw.count(marks[2], i, stop)
        if q < 0:
            break
        strings += 1
        j = q + 1
        while True:
            j = raw.find(quote, j)
            if j < 0:
                return containers, strings, containers + commas
            k = j
            while k > q + 1 and raw[k - 1:k] == slash:
                k -= 1
            if (j - k) % 2 == 0:
                break
            j += 1
        i = j + 1
    return containers, strings, containers + commas


async def read_json(request: web.Request) -> Any:
    """The body as a value. Read with :func:`runtime.server.bodies.received` (the body limit after
    decompression, the service's budget of body bytes, the minimum rate), which holds the body's
    bytes against the budget until it is parsed."""
    return await read_parsed(request, _as_is)


async def read_parsed(request: web.Request, parse: Callable[[Any], T]) -> T:
    """The body read as :func:`read_json` reads it and then turned into a request by ``parse``
    (a wire format's schema: its media's base64 decoded and their headers read, its messages
    walked). A body over ``THREAD_BYTES`` is parsed and turned in a thread, where that Python
    work lets the event loop answer others between its steps."""
    async with received(request) as raw:
        if len(raw) > THREAD_BYTES:
            return await asyncio.to_thread(_parsed_in_turn, raw, parse)
        return parse(loads(raw))


def _as_is(value: Any) -> Any:
    return value


#: big bodies are parsed one at a time (see the module docstring)
_ONE_BIG_BODY = threading.Lock()


def _parsed_in_turn(raw: bytes | bytearray, parse: Callable[[Any], T]) -> T:
    with _ONE_BIG_BODY:  # waiting here holds no interpreter lock
        return parse(loads(raw))


def json_text(text: str | bytes) -> Any:
    """JSON inside a string, with the body's limits (depth, digits, number of arrays and
    objects, text); ``ValueError`` saying what is wrong."""
    try:
        value = _parse(text)
    except RecursionError:
        raise ValueError(f"nested too deeply (at most {MAX_DEPTH} levels)") from None
    except UnicodeDecodeError as e:
        raise ValueError(str(e)) from None
    problem = tree_problem(value)
    if problem is not None:
        raise ValueError(problem[0])
    return value


def json_field(text: str, field: str) -> Any:
    """JSON sent as text in ``field`` (a tool call's ``arguments``, a schema): its value, or a
    400 naming the field."""
    try:
        return json_text(text)
    except ValueError as e:
        raise bad_request(f"'{field}' is not valid JSON: {e}", field) from None


def check_tree(value: Any) -> None:
    """Depth and text of a parsed body (see :func:`tree_problem`); ``bad_request`` otherwise."""
    problem = tree_problem(value)
    if problem is not None:
        raise bad_request(*problem)


def tree_problem(value: Any) -> tuple[str, str | None] | None:
    """What is wrong with a parsed value's depth or text (message, field), or None. Walked
    without recursion (numbers are skipped inline: a body of a million token ids costs one
    pass, not a million stack entries)."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        v, depth, path = stack.pop()
        if depth > MAX_DEPTH:
            return f"the request body is nested too deeply (at most {MAX_DEPTH} levels)", None
        items: Iterable[tuple[Any, Any]]
        if isinstance(v, dict):
            items = v.items()
            for k in v:
                if not utf8_ok(k):
                    return f"a key in '{path or 'body'}' is not valid text (a lone UTF-16 surrogate)", path or None
        elif isinstance(v, list):
            items = enumerate(v)
        else:
            if isinstance(v, str) and not utf8_ok(v):
                return f"'{path or 'body'}' is not valid text (a lone UTF-16 surrogate)", path or None
            continue
        for k, item in items:
            if isinstance(item, (int, float, bool)) or item is None:
                continue
            if isinstance(item, str):
                if item.isascii() or utf8_ok(item):
                    continue
            sub = f"{path}[{k}]" if isinstance(k, int) else (f"{path}.{k}" if path else k)
            stack.append((item, depth + 1, sub))
    return None


def require_object(body: Any, what: str = "the request body") -> dict:
    if not isinstance(body, dict):
        raise bad_request(f"{what} must be a JSON object")
    return body


# -- fields --------------------------------------------------------------------------------
def _label(prefix: str, name: str) -> str:
    return f"{prefix}{name}"


def number(obj: dict, name: str, default: float, lo: float, hi: float, prefix: str = "") -> float:
    v = obj.get(name)
    if v is None:
        return default
    field = _label(prefix, name)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not math.isfinite(v)):
        raise bad_request(f"'{field}' must be a number", field)
    if not lo <= v <= hi:
        raise bad_request(f"'{field}' must be between {lo} and {hi}, got {v}", field)
    return float(v)


def integer(obj: dict, name: str, lo: int, hi: int, prefix: str = "", *, whole_floats: bool = False) -> int | None:
    """An integer in [lo, hi], or None when absent. ``whole_floats``: accept ``4.0`` (Ollama's
    clients send numbers through JavaScript)."""
    v = obj.get(name)
    if v is None:
        return None
    field = _label(prefix, name)
    if whole_floats and isinstance(v, float) and math.isfinite(v) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad_request(f"'{field}' must be an integer", field)
    if not lo <= v <= hi:
        raise bad_request(f"'{field}' must be an integer between {lo} and {hi}, got {v}", field)
    return v


def option(obj: dict, name: str, default: float, prefix: str = "", limit: str | None = None) -> float:
    """A float sampling option in the engine's range for ``limit`` (default: ``name``)."""
    lo, hi = LIMITS[limit or name]
    return number(obj, name, default, lo, hi, prefix)


def int_option(obj: dict, name: str, prefix: str = "", limit: str | None = None, **kw) -> int | None:
    lo, hi = LIMITS[limit or name]
    return integer(obj, name, int(lo), int(hi), prefix, **kw)


def boolean(obj: dict, name: str, default: bool = False, prefix: str = "") -> bool:
    v = obj.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        field = _label(prefix, name)
        raise bad_request(f"'{field}' must be true or false", field)
    return v


def text(value: Any, field: str, *, empty: bool = True, max_chars: int = MAX_TEXT_CHARS) -> str:
    """A string that is valid text, at most ``max_chars`` long (and not empty unless ``empty``)."""
    if not isinstance(value, str):
        raise bad_request(f"'{field}' must be a string", field)
    if not empty and not value:
        raise bad_request(f"'{field}' must not be empty", field)
    if len(value) > max_chars:
        raise bad_request(f"'{field}' is {len(value)} characters; the limit is {max_chars}", field)
    if not utf8_ok(value):
        raise bad_request(f"'{field}' is not valid text (a lone UTF-16 surrogate)", field)
    return value


def optional_text(obj: dict, name: str, prefix: str = "", **kw) -> str | None:
    v = obj.get(name)
    return None if v is None else text(v, _label(prefix, name), **kw)


def stop_list(obj: dict, name: str = "stop", prefix: str = "") -> list[str]:
    """A string or a list of at most ``MAX_STOPS`` strings; empty strings are dropped."""
    v = obj.get(name)
    field = _label(prefix, name)
    if v is None:
        return []
    items = [v] if isinstance(v, str) else v
    if not isinstance(items, list) or len(items) > MAX_STOPS or not all(isinstance(s, str) for s in items):
        raise bad_request(f"'{field}' must be a string or a list of at most {MAX_STOPS} strings", field)
    for i, s in enumerate(items):
        text(s, field if isinstance(v, str) else f"{field}[{i}]", max_chars=MAX_STOP_CHARS)
    return [s for s in items if s]


def content_text(content: Any, field: str, media: MediaInput | None = None) -> str:
    """A message's content as text: a string, or a list of text parts (``{"type": "text",
    "text": "..."}``, or bare strings) joined. With ``media``, ``image_url`` and ``input_audio``
    parts are taken into it and leave their marker in the text. Other part types are refused
    by name."""
    if content is None:
        return ""
    if isinstance(content, str):
        return text(content, field)
    if not isinstance(content, list):
        raise bad_request(f"'{field}' must be a string or a list of text parts", field)
    parts = []
    for i, part in enumerate(content):
        where = f"{field}[{i}]"
        if isinstance(part, str):
            parts.append(text(part, where))
            continue
        if not isinstance(part, dict):
            raise bad_request(f"'{where}' must be a text part: {{\"type\": \"text\", \"text\": \"...\"}}", where)
        kind = part.get("type")
        if media is not None and kind == "image_url":
            url = part.get("image_url")
            parts.append(media.image_url(url.get("url") if isinstance(url, dict) else url, f"{where}.image_url.url"))
            continue
        if media is not None and kind == "input_audio":
            audio = part.get("input_audio")
            if not isinstance(audio, dict):
                raise bad_request(f"'{where}.input_audio' must be an object: {{\"data\": base64, \"format\": \"wav\"}}",
                                  f"{where}.input_audio")
            parts.append(media.audio(audio.get("data"), audio.get("format"), f"{where}.input_audio"))
            continue
        if kind != "text":
            shown = kind if isinstance(kind, str) and utf8_ok(kind) and len(kind) <= 40 else "?"
            raise bad_request(f"'{where}' is a {shown!r} part; the models served here take text parts only",
                              f"{where}.type")
        parts.append(text(part.get("text"), f"{where}.text"))
    joined = "".join(parts)
    if len(joined) > MAX_TEXT_CHARS:
        raise bad_request(f"'{field}' is {len(joined)} characters; the limit is {MAX_TEXT_CHARS}", field)
    return joined


def messages(raw: Any, roles: frozenset[str], field: str = "messages", *, parts: bool = True,
             empty: bool = False, media: MediaInput | None = None) -> list[dict]:
    """Chat messages as ``[{"role", "content"}]`` with the content flattened to one string,
    so only plain text crosses into the worker (media as markers, their bytes in ``media``).
    ``parts``: content may be a list of parts."""
    if not isinstance(raw, list) or (not raw and not empty):
        raise bad_request(f"'{field}' must be a {'' if empty else 'non-empty '}list", field)
    out = []
    for i, m in enumerate(raw):
        where = f"{field}[{i}]"
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or m["role"] not in roles:
            raise bad_request(f"{where} must be an object with a role of {sorted(roles)}", f"{where}.role")
        content = m.get("content")
        if not parts and content is not None and not isinstance(content, str):
            raise bad_request(f"'{where}.content' must be a string", f"{where}.content")
        out.append({"role": m["role"], "content": content_text(content, f"{where}.content", media)})
    return out


def token_ids(value: Any, field: str, n_vocab: int | None = None) -> list[int]:
    """A non-empty list of at most ``MAX_TOKEN_IDS`` token ids, each inside the vocabulary when
    its size is known. Checked on the event loop with built-ins that loop in C (about 5 ms for
    the most ids)."""
    if isinstance(value, list) and len(value) > MAX_TOKEN_IDS:
        raise bad_request(f"'{field}' has {len(value)} token ids; the limit is {MAX_TOKEN_IDS}", field)
    if not isinstance(value, list) or not value or set(map(type, value)) != {int}:
        raise bad_request(f"'{field}' must be a non-empty list of token ids", field)
    hi = (n_vocab - 1) if n_vocab else 2**31 - 1
    if min(value) < 0 or max(value) > hi:
        i, t = next((i, t) for i, t in enumerate(value) if not 0 <= t <= hi)
        raise bad_request(f"'{field}[{i}]' is token id {t}, outside the vocabulary (0..{hi})", f"{field}[{i}]")
    return value
