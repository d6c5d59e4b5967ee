"""The tool loop of a chat: the model asks for tool calls, the user approves them, the app runs
them and sends the results back (``role: "tool"`` messages), until the model answers in words or
the step limit is reached.

No Qt here: the chat service gives it three functions (run one streamed step, run one tool,
ask the user) and shows what it records.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field, fields

#: the most model turns one question may take (each tool round is one)
DEFAULT_MAX_STEPS = 4
#: how long one tool call may run before it is given up
DEFAULT_TOOL_TIMEOUT_S = 30.0

ALLOW_ONCE, ALLOW_CHAT, ALLOW_ALWAYS, DENY = "once", "chat", "always", "deny"


class ToolFailed(Exception):
    """A tool call that did not produce a result; the message is shown to the user and the model."""


@dataclass(slots=True)
class ToolCall:
    """One call the model made, and what became of it (kept in the answer's meta and shown)."""

    id: str
    name: str
    arguments: str
    server: str = ""
    #: pending → running → done | failed | timeout; or denied
    status: str = "pending"
    result: str = ""
    seconds: float | None = None

    def to_meta(self) -> dict:
        return asdict(self)

    def parsed_arguments(self) -> dict:
        """The arguments as an object; a model that wrote no arguments asked for none."""
        if not self.arguments.strip():
            return {}
        value = json.loads(self.arguments)
        if not isinstance(value, dict):
            raise ValueError("the arguments are not a JSON object")
        return value


@dataclass(slots=True)
class Permissions:
    """Which tools run without asking: for this chat, or always (the app keeps the latter)."""

    chat: set[str] = field(default_factory=set)
    always: set[str] = field(default_factory=set)

    def allowed(self, name: str) -> bool:
        return name in self.chat or name in self.always

    def grant(self, name: str, scope: str) -> None:
        if scope == ALLOW_CHAT:
            self.chat.add(name)
        elif scope == ALLOW_ALWAYS:
            self.always.add(name)


RunTool = Callable[[str, dict, float], Awaitable[str]]  # name, arguments, timeout -> text; raises ToolFailed
Ask = Callable[[ToolCall], Awaitable[str]]  # -> ALLOW_ONCE | ALLOW_CHAT | ALLOW_ALWAYS | DENY


def choice_for_step(step: int, max_steps: int, requested) -> object:
    """``tool_choice`` for model turn ``step`` (0-based): what the chat asked for on the first turn
    (a forced call is meant once), ``auto`` after a tool round, ``none`` on the last allowed turn
    so the loop ends with words."""
    if step >= max_steps - 1:
        return "none"
    if step == 0:
        return requested or "auto"
    return "auto"


def calls_from_deltas(raw: list[dict]) -> list[ToolCall]:
    """ToolCall records from the calls a streamed step accumulated (name, arguments, id)."""
    out = []
    for i, c in enumerate(raw):
        out.append(ToolCall(id=c.get("id") or f"call_{i}", name=c.get("name", ""), arguments=c.get("arguments", "")))
    return out


async def run_calls(calls: list[ToolCall], *, run_tool: RunTool, ask: Ask, permissions: Permissions,
                    timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
                    changed: Callable[[ToolCall], None] = lambda c: None) -> None:
    """Ask (unless allowed), run and record each call in order; never raises for a tool's failure."""
    for call in calls:
        if not permissions.allowed(call.name):
            changed(call)
            answer = await ask(call)
            if answer == DENY:
                call.status, call.result = "denied", "The user did not allow this tool call."
                changed(call)
                continue
            permissions.grant(call.name, answer)
        call.status = "running"
        changed(call)
        t0 = time.monotonic()
        try:
            args = call.parsed_arguments()
        except ValueError as e:
            call.status, call.result = "failed", f"The arguments are not valid JSON: {e}"
        else:
            try:
                call.result = await run_tool(call.name, args, timeout_s)
                call.status = "done"
            except TimeoutError:
                call.status, call.result = "timeout", f"The tool did not answer within {timeout_s:g} s."
            except ToolFailed as e:
                call.status, call.result = "failed", str(e)
        call.seconds = round(time.monotonic() - t0, 3)
        changed(call)


def round_messages(content: str, calls: list[ToolCall]) -> list[dict]:
    """The assistant turn that asked for ``calls`` and one ``tool`` message per result, as the
    OpenAI chat API takes them back."""
    assistant = {"role": "assistant", "content": content or None,
                 "tool_calls": [{"id": c.id, "type": "function",
                                 "function": {"name": c.name, "arguments": c.arguments or "{}"}} for c in calls]}
    return [assistant] + [{"role": "tool", "tool_call_id": c.id, "content": c.result} for c in calls]


#: the states a call ends in: its result (or why there is none) went back to the model
ENDED = ("done", "failed", "timeout", "denied")


def calls_from_meta(meta: dict) -> list[ToolCall]:
    """The calls an answer recorded (``meta["tool_calls"]``) that ended; an answer cut off
    mid-call keeps the raw stream pieces there, which are left out."""
    names = {f.name for f in fields(ToolCall)}
    out = []
    for d in meta.get("tool_calls") or ():
        if isinstance(d, dict) and d.get("status") in ENDED and {"id", "name", "arguments"} <= d.keys():
            out.append(ToolCall(**{k: v for k, v in d.items() if k in names}))
    return out


def history_messages(turns) -> list[dict]:
    """A conversation's turns (objects with ``role``, ``content``, ``meta``) as the chat API's
    messages: an answer that called tools is sent back with its calls and their results before
    its text, so the model still knows on the next question what the tools said."""
    msgs: list[dict] = []
    for m in turns:
        calls = calls_from_meta(m.meta or {}) if m.role == "assistant" else []
        if calls:
            msgs += round_messages("", calls)
        if m.content or m.role == "user":
            content = m.content
            if m.role == "user" and (m.meta or {}).get("attachments"):
                from app.attachments import content_parts, with_attachments

                # dropped files, as context; images and clips as content parts
                content = content_parts(with_attachments(content, m.meta["attachments"]), m.meta["attachments"])
            msgs.append({"role": m.role, "content": content})
    return msgs
