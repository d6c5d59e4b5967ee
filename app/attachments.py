"""Files attached to a message (dropped on the composer or chosen with the attach button).

Text, Markdown, code and PDF files with a text layer: their text goes to the model with the
message, as context; a file too large to send whole is refused in words (the documents library
searches those instead). Images (PNG, JPEG, GIF, WebP, BMP) and WAV sound clips go as they are, for
a model that reads them (its ``vision`` / ``audio`` capability); they are kept with the message,
so every later turn sends them again and the service's prompt cache reuses them."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any
from pathlib import Path

from app.documents import DocumentError, read_pages

#: the most characters one file may bring (about 25k tokens); larger files go to the library
MAX_CHARS = 100_000
#: the most files one message may carry
MAX_FILES = 10
#: the largest image or clip a message may carry (the service takes 20 MB)
MAX_MEDIA_BYTES = 16 << 20
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
               ".webp": "image/webp", ".bmp": "image/bmp"}
AUDIO_TYPES = {".wav": "audio/wav"}


class AttachmentError(Exception):
    """A file that cannot be attached; the message says why and what to do."""


@dataclass(slots=True, frozen=True)
class Attachment:
    name: str
    text: str
    #: "text" (its text is sent), "image" or "audio" (``data``, base64, is sent)
    kind: str = "text"
    data: str = ""
    mime: str = ""

    @property
    def size(self) -> int:
        return len(self.data) * 3 // 4 if self.kind != "text" else len(self.text.encode())

    def to_meta(self) -> dict:
        if self.kind == "text":
            return {"name": self.name, "text": self.text}
        return {"name": self.name, "kind": self.kind, "mime": self.mime, "data": self.data}


def media_kind(path: str | Path) -> str | None:
    """"image" or "audio" for a file sent as it is, None for one whose text is sent."""
    suffix = Path(path).suffix.lower()
    return "image" if suffix in IMAGE_TYPES else "audio" if suffix in AUDIO_TYPES else None


def _read_media(p: Path, size: int) -> Attachment:
    kind = media_kind(p)
    if size > MAX_MEDIA_BYTES:
        raise AttachmentError(f"{p.name} is too large to send ({size // 1_000_000} MB); "
                              f"the limit is {MAX_MEDIA_BYTES // 1_000_000} MB. Send a smaller copy.")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise AttachmentError(f"{p.name} could not be read ({e.strerror or e}).") from None
    if not data:
        raise AttachmentError(f"{p.name} is empty.")
    mime = IMAGE_TYPES.get(p.suffix.lower()) or AUDIO_TYPES[p.suffix.lower()]
    return Attachment(p.name, "", kind or "image", base64.b64encode(data).decode("ascii"), mime)


def read_attachment(path: str | Path) -> Attachment:
    """Read a dropped file (blocking: call it off the event loop)."""
    p = Path(path)
    if not p.is_file():
        raise AttachmentError(f"{p.name or p} is not a file; drop files, not folders.")
    try:
        size = p.stat().st_size
    except OSError as e:
        raise AttachmentError(f"{p.name} could not be read ({e.strerror or e}).") from None
    if media_kind(p) is not None:
        return _read_media(p, size)
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
    """A user message's text as the model gets it: each attached text file first, fenced by name."""
    texts = [a for a in attachments or () if isinstance(a, dict) and a.get("kind", "text") == "text"]
    if not texts:
        return content
    files = "\n\n".join(f"<file name=\"{a.get('name', 'file')}\">\n{a.get('text', '')}\n</file>" for a in texts)
    return f"{files}\n\n{content}" if content else files


def media_of(attachments: list[dict] | None) -> list[dict]:
    """The images and clips among a message's attachments."""
    return [a for a in attachments or () if isinstance(a, dict) and a.get("kind") in ("image", "audio")
            and isinstance(a.get("data"), str)]


def content_parts(text: str, attachments: list[dict] | None) -> str | list[dict]:
    """A user message's content for the chat API: its text, or (with images or clips) OpenAI content
    parts, the media first and then the text."""
    media = media_of(attachments)
    if not media:
        return text
    parts: list[dict] = []
    for a in media:
        if a["kind"] == "image":
            parts.append({"type": "image_url", "image_url": {"url": f"data:{a.get('mime') or 'image/png'};base64,{a['data']}"}})
        else:
            parts.append({"type": "input_audio", "input_audio": {"data": a["data"], "format": "wav"}})
    if text:
        parts.append({"type": "text", "text": text})
    return parts


def needs(attachments: list[dict] | None) -> set[str]:
    """The capabilities a message's attachments need of the model: "vision", "audio"."""
    return {"vision" if a["kind"] == "image" else "audio" for a in media_of(attachments)}


#: what an image or clip counts for in the context meter, in characters (about 256 tokens)
MEDIA_CHARS = 1024


def attachment_chars(meta: Mapping[str, Any]) -> int:
    return sum((len(a.get("text", "")) if a.get("kind", "text") == "text" else MEDIA_CHARS) + 40
               for a in meta.get("attachments") or () if isinstance(a, dict))
