"""A conversation to prompt text, through the model's own Jinja chat template.

The messages are OpenAI chat messages with tool-call arguments as objects. Before the
template sees them they are shaped as llama.cpp shapes them (``message_shaping``,
``family_shaping``), from what the template was probed to read (``template_caps``), and the
template gets the variables llama.cpp gives it (``bos_token``, ``eos_token``,
``add_generation_prompt``, ``tools``, ``enable_thinking``, ``date_string``, ``datetime``,
``strftime_now``). Nothing in a message is dropped on the way: what the template cannot
render (tools for a template that never reads them, tool calls, tool results, text that is
not text) is refused with a ``ChatTemplateError`` that says what, so the caller can describe
it another way (as text in the system message) instead of losing it.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from jinja2 import Template, TemplateSyntaxError, meta

from runtime.chat.family_shaping import family_adjustments
from runtime.chat.jinja_env import ChatEnvironment, TemplateRaised, strftime_now_at
from runtime.chat.message_shaping import shape_messages
from runtime.chat.template_caps import TemplateCaps, instrument, probe_caps

#: the variables ``render`` sets from its own arguments, which ``extra`` cannot replace
_OWN_VARIABLES = frozenset({"messages", "tools", "add_generation_prompt", "enable_thinking", "bos_token", "eos_token"})

_ENV = ChatEnvironment()
_PROBE_ENV = ChatEnvironment()
instrument(_PROBE_ENV.filters, _PROBE_ENV.tests)


class ChatTemplateError(ValueError):
    """The conversation cannot be rendered by the model's chat template (the message says why)."""


class ChatRenderer:
    """One chat template, compiled once; its capabilities are probed on first use."""

    def __init__(self, source: str, bos: str = "", eos: str = "") -> None:
        self.source = source
        self.bos = bos
        self.eos = eos
        try:
            ast = _ENV.parse(source)
        except TemplateSyntaxError as e:
            raise ChatTemplateError(f"the model's chat template is not valid Jinja (line {e.lineno}: {e.message})") from e
        self._ast = ast
        self._template: Template = _ENV.from_string(ast)
        # Firefunction v2 reads the tools as JSON text in ``functions`` (llama.cpp gave it that)
        self._reads_functions = "functions" in meta.find_undeclared_variables(ast)
        self._keeps_developer = "<|channel|>" in source  # gpt-oss has a developer role of its own
        self._adjustments = family_adjustments(source)
        self._caps: TemplateCaps | None = None

    @property
    def caps(self) -> TemplateCaps:
        """What the template renders, probed once (a few small renders)."""
        if self._caps is None:
            probe = _PROBE_ENV.from_string(self._ast)
            now = datetime.now()
            self._caps = probe_caps(lambda context: probe.render({**self._variables(now, context["tools"]),
                                                                   **context}))
        return self._caps

    def render(self, messages: list[dict], *, tools: list[dict] | None = None, add_generation_prompt: bool = True,
               enable_thinking: bool | None = None, extra: dict | None = None, now: datetime | None = None) -> str:
        """The prompt for ``messages`` (OpenAI chat messages; tool-call arguments as objects).

        ``tools``: OpenAI function tools, for a template that describes them; ``enable_thinking``:
        passed to the template only when set; ``extra``: more template variables (``reasoning_effort``,
        ``tool_choice``, ...); ``now``: the time ``strftime_now`` and ``date_string`` give.
        Raises ``ChatTemplateError`` when the template cannot render the conversation."""
        caps = self.caps
        normalized = [_normalized(m, i) for i, m in enumerate(messages)]
        _check_renderable(normalized, tools, caps)
        shaped = shape_messages(normalized, caps, keeps_developer=self._keeps_developer)
        for adjust in self._adjustments:
            shaped = adjust(shaped)
        # copies: the sandbox lets a template change what it is given (``message.update``)
        context = self._variables(now or datetime.now(), _fresh(tools))
        context.update(messages=_fresh(shaped), bos_token=self.bos, eos_token=self.eos,
                       add_generation_prompt=add_generation_prompt)
        if enable_thinking is not None:
            context["enable_thinking"] = enable_thinking
        for key, value in (extra or {}).items():
            if key in _OWN_VARIABLES:
                raise ValueError(f"'{key}' is set by render()'s own arguments, not by extra")
            context[key] = value
            if key == "reasoning_effort" and isinstance(value, str) and value:
                context.setdefault("reasoning_strength", value)  # llama.cpp sets both names
        try:
            return self._template.render(context)
        except TemplateRaised as e:
            raise ChatTemplateError(f"the model's chat template refused the conversation: {e}") from e
        except Exception as e:  # jinja raises many types (and templates call Python methods): one error for all
            raise ChatTemplateError(f"the model's chat template failed on this conversation "
                                    f"({type(e).__name__}: {e})") from e

    def _variables(self, now: datetime, tools: list[dict] | None) -> dict[str, Any]:
        variables: dict[str, Any] = {"strftime_now": strftime_now_at(now), "date_string": now.strftime("%d %b %Y"),
                                     "datetime": now.strftime("%b %d %Y")}
        if tools:
            variables["tools"] = tools
            if self._reads_functions:
                variables["functions"] = json.dumps(tools, indent=2, ensure_ascii=False)
        return variables


def _fresh(value: Any) -> Any:
    """A copy of the dicts and lists in ``value`` (the strings and numbers are shared)."""
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_fresh(v) for v in value]
    return value


def _normalized(m: Any, i: int) -> dict:
    """A message with its content as None, text or text parts, and its calls' arguments as dicts."""
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
        raise ChatTemplateError(f"message {i} is not a chat message with a role")
    out = dict(m)
    content = m.get("content")
    if isinstance(content, list):
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text" or not isinstance(part.get("text"), str):
                raise ChatTemplateError(f"messages[{i}].content[{j}] is a {kind or type(part).__name__!r} part; "
                                        "only text parts can be rendered into the prompt")
    elif content is not None and not isinstance(content, str):
        raise ChatTemplateError(f"messages[{i}].content must be text or a list of text parts")
    if m.get("tool_calls"):
        out["tool_calls"] = [_call(c, f"messages[{i}].tool_calls[{j}]") for j, c in enumerate(m["tool_calls"])]
    return out


def _call(c: Any, where: str) -> dict:
    fn = c.get("function") if isinstance(c, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise ChatTemplateError(f"{where} must be {{\"type\": \"function\", \"function\": {{\"name\", \"arguments\"}}}}")
    args = fn.get("arguments")
    if args is None:
        args = {}
    elif isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError) as e:
            raise ChatTemplateError(f"{where}.function.arguments is not JSON ({e})") from e
    if not isinstance(args, dict):
        raise ChatTemplateError(f"{where}.function.arguments must be a JSON object")
    return {**c, "type": c.get("type") or "function", "function": {**fn, "arguments": args}}


def _check_renderable(messages: list[dict], tools: list[dict] | None, caps: TemplateCaps) -> None:
    """Refuse what the template would silently leave out."""
    if tools and not caps.supports_tools:
        raise ChatTemplateError("the model's chat template does not describe tools: describe them in the system "
                                "message instead")
    for i, m in enumerate(messages):
        calls = m.get("tool_calls") or []
        if calls and not caps.supports_tool_calls:
            raise ChatTemplateError(f"messages[{i}] has tool calls, which the model's chat template does not render: "
                                    "send them as the assistant's text instead")
        if len(calls) > 1 and not caps.supports_parallel_tool_calls:
            raise ChatTemplateError(f"messages[{i}] has {len(calls)} tool calls; the model's chat template renders "
                                    "one call per message: send them as separate assistant messages")
        if m["role"] == "tool" and not caps.supports_tool_responses:
            raise ChatTemplateError(f"messages[{i}] is a tool result, which the model's chat template does not "
                                    "render: send it as a user message instead")
