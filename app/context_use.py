"""How full a chat's context is: what the service counted for the last answer (its prompt and
its completion), plus a rough count for what came after it and the message being written; or,
where the service counted the chat as its next request would send it (``/hearth/count_tokens``,
the overflow policy applied), that count and a rough one for the message being written
(``counted_use``)."""

from __future__ import annotations

from dataclasses import dataclass

from app.conversations import Message

CHARS_PER_TOKEN = 4  # a rough average for English text and code; the service's count wins when known
WARN_AT = 0.8


@dataclass(slots=True)
class ContextUse:
    used: int  #: tokens, as counted where known and estimated otherwise
    limit: int | None  #: the model's context (None when the app does not know it)
    counted: bool  #: the service counted most of it (not only an estimate)
    #: older messages the chat's overflow policy leaves out of what is sent (the service's count)
    dropped: int = 0

    @property
    def share(self) -> float | None:
        return None if not self.limit else self.used / self.limit

    @property
    def warn(self) -> bool:
        return self.share is not None and self.share >= WARN_AT


def context_use(messages: list[Message], draft: str, limit: int | None, system_prompt: str = "",
                extra_chars: int = 0) -> ContextUse:
    """The tokens the next request will hold. The last answer with usage numbers gives the
    count up to it; messages after it, ``draft`` and ``extra_chars`` (files attached to the
    draft) are estimated."""
    base, start, counted = 0, 0, False
    for i in range(len(messages) - 1, -1, -1):
        meta = messages[i].meta
        if meta.get("prompt_tokens") is not None and meta.get("finish") not in ("streaming", "interrupted"):
            base = int(meta["prompt_tokens"]) + int(meta.get("completion_tokens") or 0)
            start, counted = i + 1, True
            break
    else:
        base = len(system_prompt) // CHARS_PER_TOKEN
    from app.attachments import attachment_chars

    rest = sum(len(m.content) + attachment_chars(m.meta) for m in messages[start:]) + len(draft) + extra_chars
    return ContextUse(base + rest // CHARS_PER_TOKEN + (4 * (len(messages) - start) if rest else 0), limit, counted)


def counted_use(prompt_tokens: int, dropped: int, draft: str, limit: int | None) -> ContextUse:
    """The service's count of the chat's next request, plus the message being written."""
    return ContextUse(prompt_tokens + len(draft) // CHARS_PER_TOKEN, limit, True, dropped)
