"""The Jinja environment chat templates run in: jinja2's sandbox with what the templates use.

Chat templates are written for Hugging Face's environment (trim_blocks, lstrip_blocks, the
loop controls, ``raise_exception``, ``strftime_now``, a ``tojson`` without HTML escaping)
and, since llama.cpp renders them too, for llama.cpp's own engine, which is lenient where
jinja2 is strict: an undefined value's attribute is undefined, and a null or undefined
operand of ``+`` beside a string is the empty string. Both leniencies are reproduced here,
so a template renders in Hearth as it does in llama.cpp.

The sandbox is jinja2's mutable one: templates build lists (``ns.items.append(...)``) and
update dicts, which llama.cpp allows; attributes that start with an underscore, and Python
internals, stay out of reach, and ``range`` is capped (jinja2's ``MAX_RANGE``), so a
template's work stays bounded by its input.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from jinja2 import ChainableUndefined, TemplateError, Undefined, nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.runtime import Context
from jinja2.sandbox import SandboxedEnvironment


class TemplateRaised(TemplateError):
    """The template called ``raise_exception(message)``: it refuses the conversation."""


class LenientUndefined(ChainableUndefined):
    """An undefined value whose attributes and items are undefined too (llama.cpp's engine)."""

    __slots__ = ()


def raise_exception(message: object) -> None:
    raise TemplateRaised(str(message))


class GenerationBlocks(Extension):
    """``{% generation %}...{% endgeneration %}`` (Hugging Face marks the assistant's part of a
    training sample with it): renders its body."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> list[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


def _json_default(value: object) -> object:
    if isinstance(value, Undefined):
        return None
    if isinstance(value, Iterator):  # a filter's result (``map``, ``select``): a list in llama.cpp
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
           separators: Any = None, sort_keys: bool = False) -> str:
    """``json.dumps`` with the options templates pass; no HTML escaping (unlike jinja2's own filter)."""
    seps = tuple(separators) if isinstance(separators, (list, tuple)) and len(separators) == 2 else None
    return json.dumps(value, ensure_ascii=bool(ensure_ascii), indent=indent if isinstance(indent, int) else None,
                      separators=seps, sort_keys=bool(sort_keys), default=_json_default)


def strftime_now_at(now: datetime) -> Callable[[str], str]:
    """``strftime_now(fmt)`` for a render at ``now`` (local time, as llama.cpp formats it)."""
    def strftime_now(fmt: str) -> str:
        return now.strftime(str(fmt))
    return strftime_now


def _unchanged(value: Any) -> Any:
    return value


def _is_nothing(value: object) -> bool:
    return value is None or isinstance(value, Undefined)


class ChatEnvironment(SandboxedEnvironment):
    """jinja2's mutable sandbox configured as Hugging Face and llama.cpp render chat templates."""

    intercepted_binops = frozenset({"+"})

    def __init__(self) -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols, GenerationBlocks],
                         undefined=LenientUndefined, keep_trailing_newline=False)
        self.filters["tojson"] = tojson
        # nothing is escaped here, so ``safe`` changes nothing (as in llama.cpp); jinja2's would
        # make a Markup, and Markup + str escapes the str (Functionary v3.1's tool list)
        self.filters["safe"] = _unchanged
        self.globals["raise_exception"] = raise_exception

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        # llama.cpp's engine reads null or undefined beside a string as "" (templates written
        # for it concatenate optional fields), where Python would raise
        if operator == "+":
            if isinstance(left, str) and _is_nothing(right):
                return left
            if isinstance(right, str) and _is_nothing(left):
                return right
        return super().call_binop(context, operator, left, right)
