"""Images and audio inside a prompt: what crosses the pipe, and where they sit in the tokens.

The service puts ``MARKER`` in a message's text where each image or clip goes and sends the
media's bytes beside it (``Media``); the worker turns the text and media into chunks with
llama.cpp's multimodal library (``runtime.backends.media``). A media chunk takes as many KV
cells as it has embeddings; in the request's token list each of those positions holds a
negative id derived from a hash of the media's content and the position inside it
(``media_token_ids``), so the prefix cache's block hashes cover images like text: the same
image re-sent every turn of a conversation hits the cache, a different one never does.

A token's index in the request is its position in the model, except after an image of a model
that places images on a 2-D grid (M-RoPE: Qwen2-VL, Qwen2.5-VL, Qwen3-VL): all of such an
image's embeddings share its first position and carry their row and column in the other
components, and the text after it goes on ``n_pos`` positions later (``max(nx, ny)``, what
libmtmd's ``mtmd_input_chunk_get_n_pos`` says), not one per embedding. ``PositionMap`` maps
indices to positions; it is the identity for every other request.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the service imports this module and loads no numpy; the worker's spans carry arrays
    import numpy as np

#: where a medium goes in the rendered prompt: not a string any tokenizer or user writes
MARKER = "<__hearth_media_7c1e__>"

IMAGE, AUDIO = "image", "audio"
#: per request: media count, encoded bytes of one medium, decoded pixels of one image (a
#: 48-megapixel phone photo, 8064 x 6048, fits) and seconds of one clip; then pixels and
#: seconds of all of them together. All are checked from the headers before anything is
#: decoded (``runtime.media_costs``), in the service and again in the worker; what one client
#: may have being prepared at once is ``runtime.server.media_budget``'s.
MAX_MEDIA = 16
MAX_MEDIA_BYTES = 20 << 20
MAX_IMAGE_PIXELS = 50_000_000
MAX_AUDIO_SECONDS = 600
#: four 48-megapixel photos, or sixteen of 12 megapixels (4032 x 3024): 5.6 s of the worker's
#: helper thread to decode and shrink as PNG, 2.1 s as JPEG, on a 2-core development machine
MAX_REQUEST_PIXELS = 200_000_000
#: one clip of the longest length
MAX_REQUEST_AUDIO_SECONDS = 600


@dataclass(slots=True, frozen=True)
class Media:
    """One image or audio clip as the client sent it (encoded bytes: PNG, JPEG, WAV, ...)."""

    kind: str
    data: bytes
    #: a web address to fetch the bytes from (``--fetch-media-urls``); "" once they are here
    url: str = ""

    @property
    def digest(self) -> bytes:
        return hashlib.blake2b(self.kind.encode() + b"\0" + self.data, digest_size=16).digest()


def media_token_ids(digest: bytes, n: int) -> list[int]:
    """``n`` negative int32 ids for the positions of one medium: a 31-bit hash of its content and
    the position, so two media share a block's ids only if all of them collide."""
    out = []
    for i in range(n):
        h = hashlib.blake2b(digest + i.to_bytes(4, "little"), digest_size=4).digest()
        out.append(-1 - (int.from_bytes(h, "little") & 0x7FFFFFFE))
    return out


@dataclass(slots=True, eq=False)
class MediaSpan:
    """Positions ``start..end-1`` of a request hold one medium's embeddings."""

    start: int
    end: int
    kind: str
    #: ``() -> float32 [end - start, n_embd]``: runs the projector (the backend's)
    encode: Callable[[], object]
    #: the model attends across the whole medium at once (Gemma 3's images): its remaining
    #: positions are computed in one piece
    non_causal: bool = False
    #: the embeddings once computed (None: not yet)
    embd: object = None
    #: M-RoPE: each embedding's position components for a span whose first position is 0,
    #: int64 [n_sections, end - start] in llama.cpp's section order, and how much each grows
    #: with the span's first position ``p0`` (``grid + grid_step * p0``); None: one position each
    grid: np.ndarray | None = None
    grid_step: np.ndarray | None = None
    #: positions the span advances the sequence by (an M-RoPE image: fewer than its embeddings)
    n_pos: int = 0
    #: its embeddings share positions (an M-RoPE image): the cells of part of it cannot be told
    #: apart (``llama_memory_seq_rm`` cuts by position), so it is computed, kept and dropped
    #: whole, never cut (set from the grid)
    whole: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if not self.n_pos:
            self.n_pos = self.end - self.start
        if self.grid is not None and self.grid_step is not None and self.end - self.start > 1:
            import numpy as np

            first = self.grid[0] + self.grid_step[0]  # at p0 = 1: the same order at any p0
            self.whole = bool(np.any(np.diff(first) <= 0))

    def embeddings(self) -> object:
        if self.embd is None:
            self.embd = self.encode()
        return self.embd

    def positions(self, p0: int, a: int, b: int) -> np.ndarray:
        """The positions of embeddings ``a..b-1`` (from the span's start) when its first position
        is ``p0``: int32 [b - a], or [n_sections, b - a] for M-RoPE."""
        import numpy as np

        if self.grid is None:
            return np.arange(p0 + a, p0 + b, dtype=np.int32)
        assert self.grid_step is not None  # set with the grid
        return (self.grid[:, a:b] + self.grid_step[:, a:b] * p0).astype(np.int32)


class PositionMap:
    """A request's token index -> the model's position (the first component under M-RoPE).

    Positions grow with the index and never fall; inside a span of shared positions (``whole``)
    they stay. So a range of indices ``i0..i1-1`` is the range of positions
    ``pos_of(i0)..pos_of(i1)-1`` of the same cells wherever neither end falls inside such a
    span; an end inside one counts the whole span with the range that holds its last token.
    Small and free of embeddings: the KV cache manager keeps one per sequence that holds cells.
    """

    __slots__ = ("_spans",)

    def __init__(self, spans: list[MediaSpan]) -> None:
        #: (start, end, positions saved before it and after it, component 0 of its grid and
        #: of its step, whole) of each span whose positions are not its indices
        self._spans: list[tuple[int, int, int, int, np.ndarray | None, np.ndarray | None, bool]] = []
        saved = 0
        for s in spans:
            n = s.end - s.start
            plain = s.grid is None or s.grid_step is None or (
                list(s.grid[0]) == list(range(n)) and all(s.grid_step[0] == 1))
            if plain and s.n_pos == n:
                continue  # one position per embedding, in order: indices and positions agree
            g = s.grid[0] if s.grid is not None else None
            step = s.grid_step[0] if s.grid_step is not None else None
            self._spans.append((s.start, s.end, saved, saved + n - s.n_pos, g, step, s.whole))
            saved += n - s.n_pos

    @property
    def identity(self) -> bool:
        return not self._spans

    def pos_of(self, i: int) -> int:
        """The position of token ``i`` (``i`` past the last token: where it would go)."""
        saved = 0
        for start, end, before, after, g, step, _ in self._spans:
            if i < start:
                break
            if i < end:
                if g is None or step is None:
                    return i - before
                return int(g[i - start] + step[i - start] * (start - before))
            saved = after
        return i - saved

    def floor(self, i: int) -> int:
        """The largest cut ``<= i`` that falls inside no span of shared positions: ``i``, or the
        start of the span it falls inside."""
        for start, end, _, _, _, _, whole in self._spans:
            if i <= start:
                break
            if whole and i < end:
                return start
        return i


@dataclass(slots=True, eq=False)
class MediaLayout:
    """A request's media spans, in order."""

    spans: list[MediaSpan] = field(default_factory=list)
    #: the native chunks the spans encode from, freed with this object (backend's)
    owner: object = None
    _map: PositionMap | None = None

    @property
    def pos_map(self) -> PositionMap:
        """Index -> position for this request (built once the spans are all in)."""
        if self._map is None:
            self._map = PositionMap(self.spans)
        return self._map

    def pos_of(self, i: int) -> int:
        return self.pos_map.pos_of(i)

    def span_at(self, pos: int) -> MediaSpan | None:
        for s in self.spans:
            if s.start <= pos < s.end:
                return s
        return None

    def clip(self, start: int, n: int) -> int:
        """How many of ``n`` tokens from ``start`` one step computes: text stops at the next
        medium, a medium's positions are not mixed with text (they go in their own decode); a
        medium that attends across itself, or whose embeddings share positions, goes whole."""
        for s in self.spans:
            if start < s.start:
                return min(n, s.start - start)
            if start < s.end:
                return s.end - start if s.non_causal or s.whole else min(n, s.end - start)
        return n

    def positions(self) -> int:
        return sum(s.end - s.start for s in self.spans)


def sniff_mime(data: bytes) -> str:
    """The MIME type of an encoded image or clip from its first bytes (``application/octet-stream``
    when unknown)."""
    for magic, mime in ((b"\x89PNG", "image/png"), (b"\xff\xd8\xff", "image/jpeg"), (b"GIF8", "image/gif"),
                        (b"BM", "image/bmp"), (b"RIFF", "")):
        if data.startswith(magic):
            if mime:
                return mime
            return "image/webp" if data[8:12] == b"WEBP" else "audio/wav"
    return "application/octet-stream"


class MediaPlaces(ValueError):
    """The messages' text holds more or fewer ``MARKER`` places than there are media: the
    client typed the marker itself (the client's fault: a 400)."""


def media_places(messages: list[dict]) -> int:
    return sum(m["content"].count(MARKER) for m in messages if isinstance(m.get("content"), str))


def with_media_parts(messages: list[dict], media: list[Media]) -> list[dict]:
    """Messages whose text holds ``MARKER`` as OpenAI content parts: text, ``image_url`` with a
    data URL, ``input_audio`` (for an upstream server that reads the OpenAI format). Raises
    ``MediaPlaces`` unless the text has one place for each medium."""
    import base64

    places = media_places(messages)
    if places != len(media):
        raise MediaPlaces(f"the messages' text holds {places} places for {len(media)} images and clips: the text "
                          f"must not contain {MARKER!r}, which marks where a medium goes; remove it")
    items = iter(media)
    out = []
    for m in messages:
        text = m.get("content")
        if not isinstance(text, str) or MARKER not in text:
            out.append(m)
            continue
        parts: list[dict] = []
        for i, piece in enumerate(text.split(MARKER)):
            if i:
                medium = next(items)
                b64 = base64.b64encode(medium.data).decode("ascii")
                if medium.kind == AUDIO:
                    parts.append({"type": "input_audio", "input_audio": {"data": b64, "format": "wav"}})
                else:
                    url = f"data:{sniff_mime(medium.data)};base64,{b64}"
                    parts.append({"type": "image_url", "image_url": {"url": url}})
            if piece:
                parts.append({"type": "text", "text": piece})
        out.append({**m, "content": parts})
    return out
