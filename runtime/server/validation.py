"""The one validator of request bodies, shared by every wire format (OpenAI, Ollama, ...).

Each helper reads one field of a JSON object and returns a typed value, or raises a 400
(``bad_request``) that names the field by its full path (``options.top_k``,
``messages[2].content[0].text``). The allowed ranges of the sampling options are the
engine's own table (``SamplingParams``' ``LIMITS``), so the service refuses exactly what the
worker would, with a better message, before anything crosses into the worker.

``read_json`` turns a body into a value, refusing any shape of malformed JSON with a 400:
invalid syntax or UTF-8, ``NaN``/``Infinity`` literals, integers of more than
``MAX_INT_DIGITS`` digits, nesting deeper than ``MAX_DEPTH``, and strings (keys included)
with lone surrogates (``"\\ud800"`` is valid JSON but not text).
"""

from __future__ import annotations

import json
import math
from typing import Any

from aiohttp import web

from runtime.sampling_params import LIMITS, MAX_STOP_CHARS, MAX_STOPS, utf8_ok
from runtime.server.errors import bad_request

MAX_DEPTH = 64
MAX_INT_DIGITS = 40
#: one message's or prompt's text, in characters (the body limit bounds the sum)
MAX_TEXT_CHARS = 4 * 1024 * 1024


# -- the body ------------------------------------------------------------------------------
def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits (at most {MAX_INT_DIGITS} are accepted)")
    return int(text)


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def loads(raw: bytes | str) -> Any:
    """A JSON body as a value; ``bad_request`` for anything malformed (see the module doc)."""
    try:
        value = json.loads(raw, parse_int=_parse_int, parse_constant=_refuse_constant)
    except RecursionError:
        raise bad_request(f"the request body is nested too deeply (at most {MAX_DEPTH} levels)") from None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        raise bad_request(f"the request body is not valid JSON: {e}") from None
    check_tree(value)
    return value


async def read_json(request: web.Request) -> Any:
    return loads(await request.read())


def check_tree(value: Any) -> None:
    """Depth and text of a parsed body, walked without recursion (numbers are skipped inline:
    a body of a million token ids costs one pass, not a million stack entries)."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        v, depth, path = stack.pop()
        if depth > MAX_DEPTH:
            raise bad_request(f"the request body is nested too deeply (at most {MAX_DEPTH} levels)")
        if isinstance(v, dict):
            items = v.items()
            for k in v:
                if not utf8_ok(k):
                    raise bad_request(f"a key in '{path or 'body'}' is not valid text (a lone UTF-16 surrogate)",
                                      path or None)
        elif isinstance(v, list):
            items = enumerate(v)
        else:
            if isinstance(v, str) and not utf8_ok(v):
                raise bad_request(f"'{path or 'body'}' is not valid text (a lone UTF-16 surrogate)", path or None)
            continue
        for k, item in items:
            if isinstance(item, (int, float, bool)) or item is None:
                continue
            if isinstance(item, str):
                if item.isascii() or utf8_ok(item):
                    continue
            sub = f"{path}[{k}]" if isinstance(k, int) else (f"{path}.{k}" if path else k)
            stack.append((item, depth + 1, sub))


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


def content_text(content: Any, field: str) -> str:
    """A message's content as text: a string, or a list of text parts (``{"type": "text",
    "text": "..."}``, or bare strings) joined. Other part types are refused by name."""
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
             empty: bool = False) -> list[dict]:
    """Chat messages as ``[{"role", "content"}]`` with the content flattened to one string,
    so only plain text crosses into the worker. ``parts``: content may be a list of parts."""
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
        out.append({"role": m["role"], "content": content_text(content, f"{where}.content")})
    return out


def token_ids(value: Any, field: str, n_vocab: int | None = None) -> list[int]:
    """A non-empty list of token ids, each inside the vocabulary when its size is known."""
    if not isinstance(value, list) or not value or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise bad_request(f"'{field}' must be a non-empty list of token ids", field)
    hi = (n_vocab - 1) if n_vocab else 2**31 - 1
    for i, t in enumerate(value):
        if not 0 <= t <= hi:
            raise bad_request(f"'{field}[{i}]' is token id {t}, outside the vocabulary (0..{hi})", f"{field}[{i}]")
    return value
