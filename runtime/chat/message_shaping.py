"""Messages in the shape a template reads, from what its capabilities say it takes.

llama.cpp's workarounds (``common/chat.cpp``, namespace ``workaround``), applied when the
probed capabilities call for them: the developer role read as system; a system message
merged into the next message where the template has no system role; a null content given
as ``""``; content as typed parts or as text; tool-call arguments as an object or as JSON
text. Hearth adds two that llama.cpp lacks (it renders such a conversation only to have the
template raise): turns made to alternate for templates that insist on it, and call ids of
the nine characters Mistral's templates insist on.

Every function takes normalized messages (content ``None``, a string, or a list of text
parts; calls with their arguments as dicts) and returns new ones; the input is not changed.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from runtime.chat.template_caps import TemplateCaps


def shape_messages(messages: list[dict], caps: TemplateCaps, *, keeps_developer: bool) -> list[dict]:
    """The generic workarounds, in llama.cpp's order. ``keeps_developer``: the template has a
    developer role of its own (gpt-oss's channel format)."""
    out = [dict(m) for m in messages]
    if not keeps_developer:
        out = [{**m, "role": "system"} if m.get("role") == "developer" else m for m in out]
    if not caps.supports_system_role:
        out = merge_system_messages(out)
    if caps.requires_alternating_roles:
        out = alternate_roles(out)
    out = [_content_for(m, caps) for m in out]
    if not caps.requires_object_arguments:
        out = [_arguments_as_text(m) for m in out]
    if caps.requires_nine_char_call_ids:
        out = [_short_ids(m) for m in out]
    return out


def text_of(content: Any) -> str:
    """Content as text: text parts joined by a newline (llama.cpp's ``concat_content_parts``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(part["text"] for part in content)


def merge_system_messages(messages: list[dict]) -> list[dict]:
    """Each system message goes into the next message, joined by a newline (llama.cpp merges
    the first; a later one would be refused or dropped by such a template, so it merges all).
    A system message with nothing after it becomes a user message rather than vanish."""
    out: list[dict] = []
    pending: list[str] = []
    for m in messages:
        if m.get("role") == "system":
            pending.append(text_of(m.get("content")))
            continue
        if pending:
            m = {**m, "content": "\n".join([*pending, text_of(m.get("content"))])}
            pending = []
        out.append(m)
    if pending:
        out.append({"role": "user", "content": "\n".join(pending)})
    return out


def alternate_roles(messages: list[dict]) -> list[dict]:
    """Turns that alternate, for templates that refuse anything else (Mistral's, Gemma 2's):
    consecutive user turns, and consecutive assistant turns without calls, become one turn
    (joined by a blank line, as Mistral's own tokenizer joins them); a user turn right after
    tool results gets an empty assistant turn before it (the model said nothing more after
    the results). Nothing is dropped and no text is invented."""
    out: list[dict] = []
    for m in messages:
        prev = out[-1] if out else None
        role = m.get("role")
        if prev is not None and role == prev.get("role") and role in ("user", "assistant") \
                and not m.get("tool_calls") and not prev.get("tool_calls"):
            out[-1] = {**prev, "content": f"{text_of(prev.get('content'))}\n\n{text_of(m.get('content'))}"}
            continue
        if prev is not None and role == "user" and prev.get("role") == "tool":
            out.append({"role": "assistant", "content": ""})
        out.append(m)
    return out


def _content_for(m: dict, caps: TemplateCaps) -> dict:
    content = m.get("content")
    if content is None:
        return {**m, "content": ""} if caps.requires_non_null_content else m
    if isinstance(content, list) and not caps.supports_typed_content:
        return {**m, "content": text_of(content)}
    if isinstance(content, str) and caps.requires_typed_content:
        return {**m, "content": [{"type": "text", "text": content}]}
    return m


def _arguments_as_text(m: dict) -> dict:
    if not m.get("tool_calls"):
        return m
    calls = []
    for c in m["tool_calls"]:
        fn = c["function"]
        calls.append({**c, "function": {**fn, "arguments": json.dumps(fn["arguments"], ensure_ascii=False)}})
    return {**m, "tool_calls": calls}


def nine_char_id(call_id: str) -> str:
    """A call id as the nine letters and digits Mistral's templates accept: kept when it is
    one, otherwise a digest of it (the same id always maps to the same one, so a call and its
    result still match, and a conversation renders the same every time)."""
    if len(call_id) == 9 and call_id.isascii() and call_id.isalnum():
        return call_id
    return hashlib.sha256(call_id.encode()).hexdigest()[:9]


def _short_ids(m: dict) -> dict:
    if m.get("tool_calls"):
        m = {**m, "tool_calls": [{**c, "id": nine_char_id(str(c.get("id") or ""))} for c in m["tool_calls"]]}
    if m.get("role") == "tool":
        m = {**m, "tool_call_id": nine_char_id(str(m.get("tool_call_id") or ""))}
    return m
