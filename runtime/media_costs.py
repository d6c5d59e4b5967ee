"""What an image or clip will cost to prepare, read from its header before any work starts.

Preparing a medium costs the worker in proportion to its pixels (an image is decoded whole,
then shrunk to the projector's size) or its seconds (a clip is decoded, resampled and cut into
30 s windows, each one a pass of the audio encoder), not to its bytes: a PNG of one colour
compresses 100 megapixels into a few hundred kilobytes, and a 600 s clip at 1 kHz, 8-bit, is
600 kB. So each medium's cost is read from its header, here, in pure Python (no decoder runs,
a bounded number of steps, microseconds a medium), and checked against three limits:

- one image at most ``MAX_IMAGE_PIXELS``, one clip at most ``MAX_AUDIO_SECONDS``;
- one request at most ``MAX_REQUEST_PIXELS`` and ``MAX_REQUEST_AUDIO_SECONDS`` in all
  (``RequestCosts``);
- one client at most as much being prepared at once (``runtime.server.media_budget``).

The header is read as Pillow and the ``wave`` module read it in the worker, where it differs
from the first field a naive reader would take: a JPEG's last frame header before its scan
(the largest is taken here), a PNG's last ``IHDR``, a GIF's screen grown to hold its first
frame. A header this module cannot size (another format, one cut short, or more header
segments than a real file has) counts as the largest image or clip allowed; bytes that are no
WAV file count nothing (the worker refuses them without decoding). The worker checks again
with Pillow's and ``wave``'s own reading (``runtime.backends.media``) before it decodes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from runtime.media import (
    AUDIO, IMAGE, MAX_AUDIO_SECONDS, MAX_IMAGE_PIXELS, MAX_REQUEST_AUDIO_SECONDS, MAX_REQUEST_PIXELS, Media,
)

#: header segments, chunks or blocks read at most before giving up (real files have tens)
MAX_HEADER_STEPS = 1024
#: bytes that are no segment between a JPEG's segments, at most (Pillow steps over them one at a
#: time; a real file has none, or a few fill bytes)
MAX_JPEG_JUNK = 4096
_PNG = b"\x89PNG\r\n\x1a\n"
#: JPEG markers that carry a frame's size: SOF0-15 but DHT (C4), JPG (C8) and DAC (CC)
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
#: JPEG markers without a length field: TEM, RST0-7, SOI, EOI
_BARE = frozenset({0x01, *range(0xD0, 0xDA)})


class MediaTooLarge(ValueError):
    """A medium, or the request's media together, pass a limit; the text says which."""


@dataclass(frozen=True, slots=True)
class MediaCost:
    """Pixels to decode and seconds of audio to hear."""

    pixels: int = 0
    seconds: float = 0.0
    #: how the header reads, for messages ("10000x10000 pixels"); not part of the cost
    shown: str = field(default="", compare=False)

    def __add__(self, other: MediaCost) -> MediaCost:
        return MediaCost(self.pixels + other.pixels, self.seconds + other.seconds)

    def __sub__(self, other: MediaCost) -> MediaCost:
        return MediaCost(self.pixels - other.pixels, self.seconds - other.seconds)

    def __bool__(self) -> bool:
        return self.pixels > 0 or self.seconds > 0

    def within(self, pixels: int, seconds: float) -> bool:
        return self.pixels <= pixels and self.seconds <= seconds

    def __str__(self) -> str:
        return f"{self.pixels:,} pixels and {self.seconds:,.0f} s of audio"


# -- images -------------------------------------------------------------------------------------
def image_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from an image's header (PNG, JPEG, GIF, WebP, BMP), as Pillow will
    decode it or larger; None for another format or a header this cannot read."""
    try:
        if data.startswith(_PNG):
            return _png(data)
        if data.startswith(b"\xff\xd8\xff"):
            return _jpeg(data)
        if data[:6] in (b"GIF87a", b"GIF89a"):
            return _gif(data)
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return _webp(data)
        if data.startswith(b"BM"):
            return _bmp(data)
    except (struct.error, IndexError):  # cut short inside the header
        return None
    return None


def _png(data: bytes) -> tuple[int, int] | None:
    """The ``IHDR`` chunks before the first image data (Pillow keeps the last one read)."""
    pos, size = 8, None
    for _ in range(MAX_HEADER_STEPS):
        length, kind = struct.unpack_from(">I4s", data, pos)
        if kind == b"IHDR":
            w, h = struct.unpack_from(">II", data, pos + 8)
            size = (max(w, size[0]), max(h, size[1])) if size else (w, h)
        elif kind in (b"IDAT", b"fdAT", b"IEND"):
            return size
        pos += 12 + length
    return None


def _jpeg(data: bytes) -> tuple[int, int] | None:
    """The frame headers (SOFn) before the first scan; the largest of them (Pillow keeps the
    last one read, as a decoder would)."""
    pos, size, junk = 2, None, 0
    for _ in range(MAX_HEADER_STEPS):
        found = data.find(b"\xff", pos)  # Pillow skips other bytes between segments
        if found < 0 or found + 1 >= len(data):
            return size
        junk, pos = junk + found - pos, found
        if junk > MAX_JPEG_JUNK:
            return None
        marker = data[pos + 1]
        if marker in (0x00, 0xFF):  # an escaped 0xFF, or fill bytes
            pos += 1 if marker == 0xFF else 2
            continue
        if marker in _BARE:
            pos += 2
            continue
        if marker == 0xDA:  # start of scan: the header is over
            return size
        (length,) = struct.unpack_from(">H", data, pos + 2)
        if marker in _SOF:
            h, w = struct.unpack_from(">HH", data, pos + 5)
            size = (max(w, size[0]), max(h, size[1])) if size else (w, h)
        pos += 2 + length
    return None


def _gif(data: bytes) -> tuple[int, int] | None:
    """The logical screen, grown to hold the first frame where it reaches past it (as Pillow
    grows it)."""
    w, h, flags = struct.unpack_from("<HHB", data, 6)
    pos = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    for _ in range(MAX_HEADER_STEPS):
        if pos >= len(data):
            return w, h
        kind = data[pos]
        if kind == 0x3B:  # the trailer: no frame
            return w, h
        if kind == 0x21:  # an extension: its label, then sub-blocks up to an empty one
            pos += 2
            for _ in range(MAX_HEADER_STEPS):
                n = data[pos]
                pos += 1 + n
                if n == 0:
                    break
            else:
                return None
            continue
        if kind == 0x2C:  # the first frame's descriptor
            x0, y0, fw, fh = struct.unpack_from("<HHHH", data, pos + 1)
            return max(w, x0 + fw), max(h, y0 + fh)
        pos += 1  # Pillow steps over any other byte
    return None


def _webp(data: bytes) -> tuple[int, int] | None:
    """The canvas (``VP8X``) or the one frame's size (``VP8`` lossy, ``VP8L`` lossless)."""
    chunk = data[12:16]
    if chunk == b"VP8X":
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
        return (w, h) if len(data) >= 30 else None
    if chunk == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        w, h = struct.unpack_from("<HH", data, 26)
        return w & 0x3FFF, h & 0x3FFF
    if chunk == b"VP8L" and data[20] == 0x2F:
        (bits,) = struct.unpack_from("<I", data, 21)
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


def _bmp(data: bytes) -> tuple[int, int] | None:
    (header,) = struct.unpack_from("<I", data, 14)
    if header == 12:  # OS/2 1.x
        return struct.unpack_from("<HH", data, 18)
    w, h = struct.unpack_from("<ii", data, 18)
    return abs(w), abs(h)


# -- audio --------------------------------------------------------------------------------------
def clip_seconds(data: bytes) -> float | None:
    """A WAV file's length from its header (the ``data`` chunk's frames / the rate, as the
    ``wave`` module reads them); None for a header this cannot read."""
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    pos, frame, rate = 12, 0, 0
    try:
        for _ in range(MAX_HEADER_STEPS):
            kind, length = struct.unpack_from("<4sI", data, pos)
            if kind == b"fmt ":
                channels, rate = struct.unpack_from("<HI", data, pos + 10)
                (bits,) = struct.unpack_from("<H", data, pos + 22)
                frame = channels * ((bits + 7) // 8)
            elif kind == b"data":
                return length // frame / rate if frame and rate else None
            pos += 8 + length + (length & 1)  # chunks are padded to an even length
    except struct.error:
        return None
    return None


# -- the estimate, and the limits ---------------------------------------------------------------
def estimate(m: Media) -> MediaCost:
    """The cost of one medium from its header (nothing for one still to be fetched)."""
    if m.url and not m.data:
        return MediaCost()
    if m.kind == AUDIO:
        seconds = clip_seconds(m.data)
        if seconds is not None:
            return MediaCost(0, seconds, f"{seconds:,.0f} s")
        # a WAV file this cannot read counts as the longest clip; one that is no WAV file as
        # nothing (the worker's ``wave`` refuses it at its first bytes)
        return MediaCost(0, MAX_AUDIO_SECONDS) if m.data[:4] == b"RIFF" and m.data[8:12] == b"WAVE" else MediaCost()
    size = image_size(m.data)
    if size is None:
        return MediaCost(MAX_IMAGE_PIXELS, 0.0)
    return MediaCost(size[0] * size[1], 0.0, f"{size[0]}x{size[1]} pixels")


class RequestCosts:
    """One request's media, added in order, against the limits of one medium and of a request."""

    def __init__(self) -> None:
        self.total = MediaCost()

    def add(self, m: Media) -> MediaCost:
        """Add one medium's estimate; ``MediaTooLarge`` where it passes a limit."""
        return self.add_cost(m.kind, estimate(m))

    def add_cost(self, kind: str, cost: MediaCost) -> MediaCost:
        """Add a medium's cost as read elsewhere (the worker reads it with Pillow and ``wave``)."""
        if kind == IMAGE and cost.pixels > MAX_IMAGE_PIXELS:
            raise MediaTooLarge(f"the image is {cost.shown or f'{cost.pixels:,} pixels'}; the limit is "
                                f"{MAX_IMAGE_PIXELS:,} pixels an image (a 48-megapixel photo fits): scale it down")
        if kind == AUDIO and cost.seconds > MAX_AUDIO_SECONDS:
            raise MediaTooLarge(f"the clip is {cost.seconds:,.0f} s; the limit is {MAX_AUDIO_SECONDS} s a clip: "
                                "cut it into shorter ones")
        total = self.total + cost
        if total.pixels > MAX_REQUEST_PIXELS:
            raise MediaTooLarge(f"with this image the request's images hold {total.pixels:,} pixels; the limit is "
                                f"{MAX_REQUEST_PIXELS:,} pixels a request (four 48-megapixel photos, or sixteen of 12 "
                                "megapixels): send fewer or smaller images")
        if total.seconds > MAX_REQUEST_AUDIO_SECONDS:
            raise MediaTooLarge(f"with this clip the request's audio lasts {total.seconds:,.0f} s; the limit is "
                                f"{MAX_REQUEST_AUDIO_SECONDS} s a request: send less audio at once")
        self.total = total
        return cost


def request_cost(media: list[Media] | None) -> MediaCost:
    """The estimated cost of a request's media; ``MediaTooLarge`` where they pass a limit."""
    costs = RequestCosts()
    for m in media or ():
        costs.add(m)
    return costs.total
