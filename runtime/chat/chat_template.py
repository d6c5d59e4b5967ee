"""Chat messages to prompt text: the model's own Jinja template, or a plain fallback.

The template renders through ``runtime.chat.renderer.ChatRenderer`` (jinja2's sandbox, the
messages shaped as llama.cpp shapes them). The fallback, for models whose GGUF carries no
``tokenizer.chat_template`` (base models such as Gemma 3 270M), is documented in
``docs/architecture.md``::

    {system}\\n\\n            (only when there is a system message)
    User: {content}\\n
    Assistant: {content}\\n
    ...
    Assistant:

with ``"\\nUser:"`` as an extra stop string, so a base model does not write the user's
next turn.
"""

from __future__ import annotations

from runtime.chat.renderer import ChatRenderer, ChatTemplateError

__all__ = ["FALLBACK_STOP", "ChatTemplate", "ChatTemplateError", "render_plain"]

FALLBACK_STOP = ["\nUser:"]


def _text(content: object) -> str:
    """OpenAI content is a string or a list of parts; only text parts are supported."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return "" if content is None else str(content)


def render_plain(messages: list[dict]) -> str:
    parts: list[str] = []
    for m in messages:
        role, text = m.get("role"), _text(m.get("content"))
        if role in ("system", "developer"):
            parts.append(f"{text}\n\n")
        elif role == "assistant":
            parts.append(f"Assistant: {text}\n")
        else:
            parts.append(f"User: {text}\n")
    parts.append("Assistant:")
    return "".join(parts)


class ChatTemplate:
    def __init__(self, template: str | None, bos: str, eos: str) -> None:
        self.bos = bos
        self.eos = eos
        self._renderer = ChatRenderer(template, bos=bos, eos=eos) if template else None
        self.stop: list[str] = [] if template else list(FALLBACK_STOP)

    @property
    def is_fallback(self) -> bool:
        return self._renderer is None

    @property
    def source(self) -> str | None:
        """The Jinja template's text (None: the plain fallback)."""
        return self._renderer.source if self._renderer is not None else None

    @property
    def renderer(self) -> ChatRenderer | None:
        """The compiled template (None: the plain fallback)."""
        return self._renderer

    def render(self, messages: list[dict], **variables) -> str:
        """``variables``: ``tools``, ``enable_thinking``, and extra template variables
        (``reasoning_effort``, ``tool_choice``, ...). Raises ``ChatTemplateError``."""
        if self._renderer is None:
            return render_plain(messages)
        tools = variables.pop("tools", None)
        enable_thinking = variables.pop("enable_thinking", None)
        return self._renderer.render(messages, tools=tools, enable_thinking=enable_thinking, extra=variables)
