"""Images and audio in a request body, as each wire format sends them, checked before decoding.

Every format carries media as base64 (OpenAI's ``data:`` URLs and ``input_audio``, Anthropic's
``base64`` sources, Ollama's ``images``); a ``MediaInput`` takes them in message order, checks
count and size from the string's length before decoding it, decodes the base64 (strict, a quarter-megabyte
a call, in the thread that parses the body), reads each one's cost from its header (``runtime.media_costs``: pixels,
seconds) against the limits of one medium and of the request, and leaves
``runtime.media.MARKER`` where each one goes in the text. An error names the field of the
medium that passed a limit. The pixels and samples are decoded in the model's worker, never
here (``runtime.backends.media``). A web address is kept as such, for ``media_fetch`` (off
unless the service allows it; its image's cost is read once it is fetched).
"""

from __future__ import annotations

import base64
import binascii
import re

from runtime.media import AUDIO, IMAGE, MARKER, MAX_MEDIA, MAX_MEDIA_BYTES, Media
from runtime.media_costs import MediaTooLarge, RequestCosts
from runtime.server.errors import ApiError, bad_request

_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+)?((?:;[\w.+-]+=[\w.+-]+)*);base64,", re.ASCII)
#: audio formats read here: PCM WAV (the worker decodes it with the standard library)
AUDIO_FORMATS = frozenset({"wav", "wave", "audio/wav", "audio/x-wav", "audio/wave"})


#: base64 characters decoded in one call: about 1 ms here, after which the interpreter lock can
#: change hands (a request's media are decoded in a thread beside the event loop)
B64_CHUNK = 256 * 1024


def b64decode(data: str, altchars: bytes | None = None) -> bytes:
    """Strict base64 (``validate``: nothing outside the alphabet), decoded ``B64_CHUNK`` characters
    a call: one 3 MB photo in one call held the interpreter
    lock, and so the event loop beside it, for 17 ms."""
    if len(data) <= B64_CHUNK or len(data) % 4 or data.find("=", 0, len(data) - 2) >= 0:
        # short, or not whole quads of characters padded at the end only: decoded at once, so that
        # the answer is always the one of a single call
        return base64.b64decode(data, altchars=altchars, validate=True)
    return b"".join(base64.b64decode(data[i:i + B64_CHUNK], altchars=altchars, validate=True)
                    for i in range(0, len(data), B64_CHUNK))


class MediaInput:
    """The media of one request, in the order their markers appear in the messages' text."""

    def __init__(self) -> None:
        self.items: list[Media] = []
        self.costs = RequestCosts()

    def image_url(self, url: object, where: str) -> str:
        """An OpenAI / Responses image URL: a ``data:`` URL with base64 data."""
        if not isinstance(url, str):
            raise bad_request(f"'{where}' must be a string: a data URL (data:image/png;base64,...)", where)
        m = _DATA_URL.match(url[:200])
        if m is None:
            if url.startswith(("http://", "https://")) and len(url) <= 8192:
                # fetched before the request runs, where the service allows it (``media_fetch``)
                if len(self.items) >= MAX_MEDIA:
                    raise bad_request(f"'{where}': a request may carry at most {MAX_MEDIA} images and clips", where)
                self.items.append(Media(IMAGE, b"", url))
                return MARKER
            raise bad_request(f"'{where}' must be a data URL with base64 data (data:image/png;base64,...)", where)
        mime = (m.group(1) or "").lower()
        if mime and not mime.startswith("image/"):
            raise bad_request(f"'{where}' is {mime}, not an image", where)
        return self.add(IMAGE, url[m.end():], where)

    def audio(self, data: object, fmt: object, where: str) -> str:
        """OpenAI's ``input_audio``: base64 data and its format (WAV is read)."""
        if not isinstance(fmt, str) or fmt.lower() not in AUDIO_FORMATS:
            raise bad_request(f"'{where}.format' must be \"wav\"; other audio formats are not read here "
                              "(convert the clip to WAV)", f"{where}.format")
        return self.add(AUDIO, data, f"{where}.data")

    def sniffed(self, data: object, where: str) -> str:
        """Base64 media of no declared kind (Ollama's ``images``): a WAV file is audio, anything
        else an image."""
        head = data[:16] if isinstance(data, str) else ""
        if head.startswith("UklGR"):  # "RIFF": a WAV file (WebP is RIFF too: its type is at byte 8)
            try:
                riff = base64.b64decode(head[:16], validate=True)
            except (binascii.Error, ValueError):
                riff = b""
            if riff[8:12] == b"WAVE":
                return self.add(AUDIO, data, where)
        return self.add(IMAGE, data, where)

    def add(self, kind: str, data: object, where: str) -> str:
        """One base64 medium: checked, decoded, kept; returns the marker that stands for it."""
        if not isinstance(data, str) or not data:
            raise bad_request(f"'{where}' must be a non-empty base64 string", where)
        if len(self.items) >= MAX_MEDIA:
            raise bad_request(f"'{where}': a request may carry at most {MAX_MEDIA} images and clips", where)
        if len(data) // 4 * 3 > MAX_MEDIA_BYTES:
            raise bad_request(f"'{where}' is about {len(data) // 4 * 3:,} bytes; the limit is "
                              f"{MAX_MEDIA_BYTES:,} bytes for one {kind}", where)
        try:
            raw = b64decode(data.strip())
        except (binascii.Error, ValueError):
            try:  # the URL-safe alphabet, which some clients use
                raw = b64decode(data.strip(), altchars=b"-_")
            except (binascii.Error, ValueError):
                raise bad_request(f"'{where}' is not valid base64", where) from None
        if not raw:
            raise bad_request(f"'{where}' is empty", where)
        medium = Media(kind, raw)
        try:
            self.costs.add(medium)  # from its header: nothing is decoded
        except MediaTooLarge as e:
            raise ApiError(400, f"'{where}': {e}", param=where, code="invalid_media") from None
        self.items.append(medium)
        return MARKER

    @property
    def media(self) -> list[Media] | None:
        return self.items or None


def without_media(messages: list[dict]) -> list[dict]:
    """Messages to keep for a later turn: each medium's marker becomes a short note (the bytes
    are not kept, so a later turn cannot send them again)."""
    out = []
    for m in messages:
        text = m.get("content")
        if isinstance(text, str) and MARKER in text:
            m = {**m, "content": text.replace(MARKER, "[an image or audio clip from an earlier turn]")}
        out.append(m)
    return out
