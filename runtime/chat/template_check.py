"""Whether a chat template a user supplies can stand in for a model's own.

A replacement (``hearth serve --chat-template-file``, a model's stored override, ``hearth
template --template``) is read with a size cap and checked by rendering the probe conversation
below: a template that is not Jinja, that fails on an ordinary conversation, or that leaves the
user's words out of the prompt is refused with the reason, before any model loads with it.
"""

from __future__ import annotations

from pathlib import Path

from runtime.chat.renderer import ChatRenderer, ChatTemplateError

#: a template is at most this long (the largest of llama.cpp's 70 is 17 KB)
MAX_TEMPLATE_BYTES = 256 * 1024

#: the conversation a replacement must render: a system message, a turn each, the next question
PROBE_CONVERSATION: list[dict] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hello! How can I help you?"},
    {"role": "user", "content": "What is two plus two?"},
]


class TemplateRefused(ValueError):
    """The template cannot replace the model's own (the message says why and what to do)."""


def check_size(source: str) -> None:
    if len(source.encode("utf-8")) > MAX_TEMPLATE_BYTES:
        raise TemplateRefused(f"the template is over {MAX_TEMPLATE_BYTES // 1024} KiB; chat templates are a few KB: "
                              "is it the right file?")


def check_template(source: str, bos: str = "", eos: str = "") -> str:
    """The probe conversation's prompt under ``source``; ``TemplateRefused`` when it cannot render
    it or leaves the last question out."""
    check_size(source)
    if not source.strip():
        raise TemplateRefused("the template is empty")
    try:
        prompt = ChatRenderer(source, bos, eos).render(PROBE_CONVERSATION)
    except ChatTemplateError as e:
        raise TemplateRefused(f"{e} (rendering a system message, a user turn, an answer and a second question)") \
            from None
    question = PROBE_CONVERSATION[-1]["content"]
    if question not in prompt:
        raise TemplateRefused(f"the template leaves the conversation out: the last user message ({question!r}) is "
                              "not in the prompt it renders; loop over `messages` and write each one's content")
    return prompt


def read_template_file(path: str | Path) -> str:
    """A template file's text, size-capped; ``TemplateRefused`` saying what is wrong with it."""
    path = Path(path).expanduser()
    try:
        size = path.stat().st_size
        if size > MAX_TEMPLATE_BYTES:
            raise TemplateRefused(f"{path} is {size:,} bytes; chat templates are a few KB (at most "
                                  f"{MAX_TEMPLATE_BYTES // 1024} KiB): is it the right file?")
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise TemplateRefused(f"{path} does not exist") from None
    except UnicodeDecodeError as e:
        raise TemplateRefused(f"{path} is not UTF-8 text (byte {e.start}): a chat template is a Jinja text "
                              "file") from None
    except OSError as e:
        raise TemplateRefused(f"{path} cannot be read: {e.strerror or e}") from None
