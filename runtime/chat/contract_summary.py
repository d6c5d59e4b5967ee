"""A model's output contract as a person debugging a template reads it: what Hearth derived.

``contract_dict`` is the JSON form (``hearth template --contract --json``, the template route):
each part with only the fields that differ from their defaults, so the markers stand out;
``contract_lines`` the same in words, markers quoted as JSON strings (a newline shows as ``\\n``).
"""

from __future__ import annotations

import json
from dataclasses import fields
from typing import Any

from runtime.chat.contract import CallSyntax, OutputContract, ReasoningSyntax


def _changed(value: CallSyntax | ReasoningSyntax, keep: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields(value):
        v = getattr(value, f.name)
        if f.name in keep or v != f.default:
            out[f.name] = [list(x) for x in v] if f.name == "extra_keys" else v
    return out


def contract_dict(contract: OutputContract) -> dict[str, Any]:
    """The contract as JSON values: ``calls`` and ``reasoning`` (None: the template has none)."""
    return {
        "calls": _changed(contract.calls, keep=("body",)) if contract.calls is not None else None,
        "reasoning": _changed(contract.reasoning, keep=("start", "end", "opened", "opened_off"))
        if contract.reasoning is not None else None,
        "content_start": contract.content_start,
        "content_end": contract.content_end,
        "native_tools": contract.native_tools,
        "object_arguments": contract.object_arguments,
        "noise": list(contract.noise),
        **({"prompt_tail": contract.prompt_tail} if contract.prompt_tail else {}),
    }


def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def contract_lines(contract: OutputContract) -> list[str]:
    """The contract in a few lines of text."""
    c = contract.calls
    if c is None:
        lines = ["tool calls: the template renders none; a call is asked for in Hearth's JSON shape "
                 '({"tool_calls": [...]}), the tools described in the system message']
    else:
        markers = ", ".join(f"{k} {_q(v) if isinstance(v, str) else v}" for k, v in _changed(c).items() if k != "body")
        lines = [f"tool calls: {c.body} body; {markers}",
                 "tools: the template describes them" if contract.native_tools
                 else "tools: described by Hearth in the system message (the template does not describe them)"]
    r = contract.reasoning
    if r is None:
        lines.append("reasoning: no thinking markers")
    else:
        opened = ("the prompt opens it when thinking is on" + (" and when it is off" if r.opened_off else "")
                  if r.opened else "the prompt opens it when thinking is off" if r.opened_off
                  else "the model opens it itself")
        switch = "; the template has an enable_thinking switch" if r.switch else ""
        lines.append(f"reasoning: {_q(r.start)} ... {_q(r.end)}; {opened}{switch}")
    if contract.content_start or contract.content_end:
        lines.append(f"answer text: between {_q(contract.content_start)} and {_q(contract.content_end)}")
    if contract.prompt_tail:
        lines.append(f"the reply goes on from the prompt's {_q(contract.prompt_tail)} (the recipient comes first)")
    if contract.noise:
        lines.append("markup between parts (dropped): " + ", ".join(_q(n) for n in contract.noise))
    return lines
