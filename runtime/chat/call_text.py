"""Calls written out in a model's own syntax (``contract.CallSyntax``): the example a system
message shows a model whose template does not describe tools, and earlier calls for a template
that does not render them."""

from __future__ import annotations

import json

from runtime.chat.contract import JSON, KEY_SLOT, NAME_SLOT, PYTHON, TAGGED, CallSyntax
from runtime.chat.python_literals import python_text


def call_text(syntax: CallSyntax, calls: list[tuple[str, dict]]) -> str:
    """The markup of one reply holding ``calls`` (name, arguments)."""
    s = syntax
    if s.body == JSON:
        bodies = [_json_body(s, name, args) for name, args in calls]
        if s.list_wrapped:
            return f"{s.section_start}[{(s.call_sep or ', ').join(bodies)}]{s.section_end}".strip()
        inner = (s.call_sep or "").join(f"{s.call_start}{b}{s.call_end}" for b in bodies)
        return f"{s.section_start}{inner}{s.section_end}".strip()
    parts = []
    for name, args in calls:
        if s.body == PYTHON:
            quote = s.string_quote or '"'
            body = s.arg_sep.join(f"{k}{s.arg_mid}{python_text(v, quote)}" for k, v in args.items())
        elif s.body == TAGGED:
            body = s.arg_sep.join(f"{s.arg_prefix}{k}{_mid(s, v)}{_value(s, v)}{s.arg_end.replace(KEY_SLOT, k)}"
                                  for k, v in args.items())
        else:
            body = json.dumps(args, ensure_ascii=False)
        parts.append(f"{s.call_start}{s.name_prefix}{name}{s.name_suffix.replace(NAME_SLOT, name)}{body}{s.close}{s.call_end}")
    return f"{s.section_start}{s.call_sep.join(parts)}{s.section_end}".strip()


def _json_body(s: CallSyntax, name: str, args: dict) -> str:
    if s.name_is_key:
        return json.dumps({name: args}, ensure_ascii=False)
    obj: dict = {k: v for k, v in s.extra_keys}
    obj.update({s.name_key: name, s.args_key: args})
    return json.dumps(obj, ensure_ascii=False)


def _mid(s: CallSyntax, value: object) -> str:
    return s.arg_mid if isinstance(value, str) or not s.arg_mid_json else s.arg_mid_json


def _value(s: CallSyntax, value: object) -> str:
    if isinstance(value, str):
        return f"{s.string_quote}{value}{s.string_quote}" if s.string_quote else value
    return json.dumps(value, ensure_ascii=False)
