"""Chat messages to prompt text: the model's own Jinja template, or a plain fallback.

The fallback, for models whose GGUF carries no ``tokenizer.chat_template`` (base models
such as Gemma 3 270M), is documented in ``docs/architecture.md``::

    {system}\\n\\n            (only when there is a system message)
    User: {content}\\n
    Assistant: {content}\\n
    ...
    Assistant:

with ``"\\nUser:"`` as an extra stop string, so a base model does not write the user's
next turn.
"""

from __future__ import annotations

from llama_cpp.llama_chat_format import Jinja2ChatFormatter

FALLBACK_STOP = ["\nUser:"]


class ChatTemplateError(ValueError):
    """The messages could not be rendered by the model's template."""


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
        self._jinja = Jinja2ChatFormatter(template, eos_token=eos, bos_token=bos) if template else None
        self.stop: list[str] = [] if template else list(FALLBACK_STOP)

    @property
    def is_fallback(self) -> bool:
        return self._jinja is None

    @property
    def source(self) -> str | None:
        """The Jinja template's text (None: the plain fallback)."""
        return self._jinja.template if self._jinja is not None else None

    def render(self, messages: list[dict], **variables) -> str:
        """``variables``: extra template variables (``tools``, ``enable_thinking``, ...)."""
        if self._jinja is None:
            return render_plain(messages)
        normalized = [{**m, "content": _text(m.get("content"))} for m in messages]
        try:
            # llama_cpp types messages as its OpenAI TypedDicts; the template renders any message dict
            return self._jinja(messages=normalized, **variables).prompt  # type: ignore[arg-type]
        except Exception as e:  # jinja raises many types; the user needs one message
            raise ChatTemplateError(f"the model's chat template rejected the messages: {e}") from e
