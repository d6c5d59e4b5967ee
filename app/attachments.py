"""Files attached to a message (dropped on the composer): their text goes to the model with the
message, as context. Text, Markdown, code and PDF files with a text layer; a file too large to
send whole is refused in words (the documents library searches those instead)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.documents import DocumentError, read_pages

#: the most characters one file may bring (about 25k tokens); larger files go to the library
MAX_CHARS = 100_000
#: the most files one message may carry
MAX_FILES = 10


class AttachmentError(Exception):
    """A file that cannot be attached; the message says why and what to do."""


@dataclass(slots=True, frozen=True)
class Attachment:
    name: str
    text: str

    def to_meta(self) -> dict:
        return {"name": self.name, "text": self.text}


def read_attachment(path: str | Path) -> Attachment:
    """Read a dropped file (blocking: call it off the event loop)."""
    p = Path(path)
    if not p.is_file():
        raise AttachmentError(f"{p.name or p} is not a file; drop files, not folders.")
    try:
        size = p.stat().st_size
    except OSError as e:
        raise AttachmentError(f"{p.name} could not be read ({e.strerror or e}).") from None
    if p.suffix.lower() != ".pdf" and size > 4 * MAX_CHARS:
        raise AttachmentError(f"{p.name} is too large to send with a message ({size // 1000:,} KB). "
                              "Add it to the chat's documents (the paper clip): they are searched instead.")
    try:
        text = "\n\n".join(read_pages(p))
    except DocumentError as e:
        raise AttachmentError(str(e)) from None
    if len(text) > MAX_CHARS:
        raise AttachmentError(f"{p.name} is too long to send with a message ({len(text):,} characters). "
                              "Add it to the chat's documents (the paper clip): they are searched instead.")
    return Attachment(p.name, text)


def with_attachments(content: str, attachments: list[dict] | None) -> str:
    """A user message's text as the model gets it: each attached file first, fenced by name."""
    if not attachments:
        return content
    files = "\n\n".join(f"<file name=\"{a.get('name', 'file')}\">\n{a.get('text', '')}\n</file>"
                        for a in attachments if isinstance(a, dict))
    return f"{files}\n\n{content}" if content else files


def attachment_chars(meta: dict) -> int:
    return sum(len(a.get("text", "")) + 40 for a in meta.get("attachments") or () if isinstance(a, dict))
