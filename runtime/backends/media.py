"""Images and audio through llama.cpp's multimodal library (libmtmd, ``llama_cpp.mtmd_cpp``).

A ``Projector`` loads a model's ``mmproj`` file beside its text model. ``prepare`` turns a
rendered prompt (``runtime.media.MARKER`` where each medium goes) and the media's
bytes into the request's token list and its media spans; a span's ``encode`` runs the vision
or audio tower and returns its embeddings, which the engine decodes into the request's
sequence like tokens (``LlamaBackend.decode_embd``).

Untrusted bytes are decoded here in the worker, never by the native library: images with
Pillow (its decompression-bomb guard, and a pixel limit read from the header before any pixel
is decoded), audio as WAV with the standard library (PCM 8/16/24/32-bit, any rate and channel
count, resampled to the model's rate).

Before any medium is decoded, every one's header is read as the decoders read it (Pillow's
size, ``wave``'s frames) and checked against the limits of one medium and of a request
(``runtime.media_costs``; the service checked its own reading of the same headers). Then the
media are decoded one at a time, each shrunk to the longest side a projector looks at before
the next is opened: a JPEG is decoded at 1/2, 1/4 or 1/8 scale where that still leaves
``MAX_SIDE / 2`` pixels or more (libjpeg's scaled decoding), other formats are decoded whole
and shrunk before any colour conversion copies them. So a request holds one image at full size
at most, besides the shrunk ones. After a large request the heap's free pages go back to the
system (``release_free_heap``).
"""

from __future__ import annotations

import ctypes
import hashlib
import io
import threading
import wave
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as lc
import llama_cpp.mtmd_cpp as mt
import numpy as np

from runtime.backends.errors import ModelLoadError
from runtime.backends.free_heap import release_free_heap
from runtime.media import (
    AUDIO, IMAGE, MARKER, MAX_AUDIO_SECONDS, MAX_IMAGE_PIXELS, Media, MediaLayout, MediaSpan,
    media_token_ids,
)
from runtime.media_costs import MediaCost, MediaTooLarge, RequestCosts, image_size

_TEXT, _IMAGE, _AUDIO = 0, 1, 2  # mtmd_input_chunk_type
#: position components of one embedding under M-RoPE (llama.cpp's ``GGML_MROPE_SECTIONS``)
_SECTIONS = 4
#: the longest side an image reaches the projector with (vision towers see 224-1,536 pixels, and
#: tiling ones such as Idefics3 cut at most a few 512-pixel tiles from it)
MAX_SIDE = 4096
#: a request that decoded this much gives the heap's free pages back afterwards (a trim takes
#: about 0.1 s when there is a gigabyte to give back)
TRIM_PIXELS, TRIM_SECONDS = 4_000_000, 60.0


def silence_media_log(callback) -> None:
    """libmtmd logs every image it prepares and encodes: route that where llama.cpp's log goes."""
    mt.mtmd_log_set(callback, ctypes.c_void_p(0))
    mt.mtmd_helper_log_set(callback, ctypes.c_void_p(0))


class MediaError(ValueError):
    """This request's media cannot be used (the client's fault: a 400)."""


@dataclass(slots=True)
class Capabilities:
    vision: bool
    audio: bool


class _Chunks:
    """The native chunks of one prompt; freed when the last span that encodes from them goes."""

    def __init__(self, ptr) -> None:
        self.ptr = ptr

    def __del__(self) -> None:
        if self.ptr:
            mt.mtmd_input_chunks_free(self.ptr)
            self.ptr = None


class Projector:
    """One ``mmproj`` file bound to a loaded text model."""

    def __init__(self, path: str | Path, model, n_threads: int, use_gpu: bool = False) -> None:
        path = str(path)
        if not Path(path).is_file():
            raise ModelLoadError(f"projector file not found: {path}")
        params = mt.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = n_threads
        params.print_timings = False
        params.warmup = False
        self._marker = MARKER.encode()  # C keeps the pointer: the bytes must outlive the context
        params.media_marker = self._marker
        self.ctx = mt.mtmd_init_from_file(path.encode(), model, params)
        if not self.ctx:
            raise ModelLoadError(f"llama.cpp could not load the projector {Path(path).name} for this model")
        #: the text model places media with M-RoPE (Qwen2-VL's family): an image's embeddings sit on a
        #: 2-D grid of positions, each with ``_SECTIONS`` components (``mtmd_helper_decode_image_chunk``)
        self.mrope = bool(mt.mtmd_decode_use_mrope(self.ctx))
        self.caps = Capabilities(bool(mt.mtmd_support_vision(self.ctx)), bool(mt.mtmd_support_audio(self.ctx)))
        self.sample_rate = int(mt.mtmd_get_audio_sample_rate(self.ctx)) if self.caps.audio else 0
        self.n_embd = lc.llama_model_n_embd_inp(model)
        # in every medium's position ids: the prompt cache (its disk tier outlives the process)
        # never serves cells that another projector computed from the same image
        st = Path(path).stat()
        self._salt = hashlib.blake2b(f"{Path(path).name}\0{st.st_size}\0{st.st_mtime_ns}".encode(),
                                     digest_size=8).digest()
        #: tokenize and encode run on the worker's helper thread and, rarely, on the step loop
        self._lock = threading.Lock()

    def close(self) -> None:
        if self.ctx:
            mt.mtmd_free(self.ctx)
            self.ctx = None

    # -- a request's media ------------------------------------------------------------
    def prepare(self, text: str, media: list[Media], add_special: bool, parse_special: bool,
                max_span: int) -> tuple[list[int], MediaLayout]:
        """The token list of ``text`` with ``media`` in place of its markers, and the spans.

        ``max_span``: the most positions one medium may take (a non-causal one is computed in
        one decode, so it must fit one batch)."""
        if text.count(MARKER) != len(media):
            raise MediaError(f"the prompt has {text.count(MARKER)} media places for {len(media)} media")
        cost = check_costs(media)
        bitmaps: list = []
        try:
            for medium in media:  # one at a time: each is at the projector's size before the next is opened
                bitmaps.append(self._bitmap(medium))
            arr = (mt.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
            data = text.encode("utf-8")
            inp = mt.mtmd_input_text(data, len(data), add_special, parse_special)
            chunks = _Chunks(mt.mtmd_input_chunks_init())
            with self._lock:
                rc = mt.mtmd_tokenize(self.ctx, chunks.ptr, ctypes.byref(inp), arr, len(bitmaps))
        finally:
            for b in bitmaps:
                mt.mtmd_bitmap_free(b)
            if cost.pixels >= TRIM_PIXELS or cost.seconds >= TRIM_SECONDS:
                release_free_heap()
        if rc != 0:
            raise MediaError(f"the media could not be prepared for this model (libmtmd code {rc})")
        tokens: list[int] = []
        layout = MediaLayout(owner=chunks)
        # a long clip comes as several chunks (one per 30 s window): the chunk's id names its medium
        by_id = {m.digest.hex(): m for m in media}
        seen: dict[str, int] = {}
        for i in range(mt.mtmd_input_chunks_size(chunks.ptr)):
            chunk = mt.mtmd_input_chunks_get(chunks.ptr, i)
            kind = mt.mtmd_input_chunk_get_type(chunk)
            if kind == _TEXT:
                n = ctypes.c_size_t(0)
                ptr = mt.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
                tokens.extend(ptr[:n.value] if n.value else [])
                continue
            cid = (mt.mtmd_input_chunk_get_id(chunk) or b"").decode("ascii", "replace")
            m = by_id.get(cid)
            if m is None:
                raise MediaError("the multimodal library returned a chunk of no known medium")
            k = seen[cid] = seen.get(cid, -1) + 1  # the chunk's place among its medium's chunks
            n_tok = mt.mtmd_input_chunk_get_n_tokens(chunk)
            n_pos = mt.mtmd_input_chunk_get_n_pos(chunk)
            if n_pos != n_tok and not self.mrope:
                raise MediaError("this model places media on fewer positions than embeddings without M-RoPE, "
                                 "which Hearth's engine does not place")
            non_causal = bool(mt.mtmd_decode_use_non_causal(self.ctx, chunk))
            if non_causal and n_tok > max_span:
                raise MediaError(f"one {m.kind} takes {n_tok} positions, computed at once by this model; its batch "
                                 f"holds {max_span}: load it with a larger batch")
            grid, step = _grid(chunk, kind, n_tok) if self.mrope else (None, None)
            start = len(tokens)
            tokens.extend(media_token_ids(self._salt + m.digest + k.to_bytes(4, "little"), n_tok))
            layout.spans.append(MediaSpan(start, len(tokens), m.kind, self._encoder(chunks, chunk, n_tok), non_causal,
                                          grid=grid, grid_step=step, n_pos=n_pos))
        return tokens, layout

    def _encoder(self, owner: _Chunks, chunk, n_tok: int):
        def encode() -> np.ndarray:
            with self._lock:
                assert owner.ptr  # the spans keep their chunks alive
                rc = mt.mtmd_encode_chunk(self.ctx, chunk)
                if rc != 0:
                    raise RuntimeError(f"the projector failed on this medium (libmtmd code {rc})")
                out = mt.mtmd_get_output_embd(self.ctx)
                return np.ctypeslib.as_array(out, shape=(n_tok * self.n_embd,)).reshape(n_tok, self.n_embd).copy()
        return encode

    def _bitmap(self, m: Media):
        if m.kind == IMAGE:
            if not self.caps.vision:
                raise MediaError("this model reads no images (its projector is for audio)")
            w, h, rgb = decode_image(m.data)
            buf = (ctypes.c_uint8 * len(rgb)).from_buffer_copy(rgb)
            bitmap = mt.mtmd_bitmap_init(w, h, buf)
        elif m.kind == AUDIO:
            if not self.caps.audio:
                raise MediaError("this model hears no audio (its projector is for images)")
            pcm = decode_wav(m.data, self.sample_rate)
            bitmap = mt.mtmd_bitmap_init_from_audio(len(pcm), pcm.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
        else:
            raise MediaError(f"unknown medium {m.kind!r}")
        if not bitmap:
            raise MediaError(f"the {m.kind} could not be handed to the projector")
        mt.mtmd_bitmap_set_id(bitmap, m.digest.hex().encode())
        return bitmap


def _grid(chunk, kind: int, n_tok: int) -> tuple[np.ndarray, np.ndarray]:
    """An M-RoPE medium's positions as ``mtmd_helper_decode_image_chunk`` lays them out: an
    image's from ``mtmd_image_tokens_get_decoder_pos`` (sections t, y, x, z: Qwen-VL's grid is
    (p0, p0 + row, p0 + column, 0)), a clip's ``p0 + i`` in every section. Returned for p0 = 0,
    with each component's growth per unit of p0 (read at p0 = 0 and 1: the layouts are linear)."""
    if kind != _IMAGE:
        grid = np.tile(np.arange(n_tok, dtype=np.int64), (_SECTIONS, 1))
        return grid, np.ones_like(grid)
    image = mt.mtmd_input_chunk_get_tokens_image(chunk)
    at = np.zeros((2, _SECTIONS, n_tok), dtype=np.int64)
    for p0 in (0, 1):
        for i in range(n_tok):
            d = mt.mtmd_image_tokens_get_decoder_pos(image, p0, i)
            at[p0, :, i] = (d.t, d.y, d.x, d.z)  # set_position_mrope_2d's order
    return at[0], at[1] - at[0]


#: modes shrunk before they are converted to RGB (``"P"`` and ``"1"`` resize only by nearest
#: neighbour, and alpha ones through a premultiplied full-size copy: those are converted first)
_SHRINK_FIRST = frozenset({"RGB", "L", "CMYK", "YCbCr"})
#: formats whose header ``runtime.media_costs`` reads: one it cannot read in a bounded number of
#: steps is refused before Pillow walks it a byte at a time
_KNOWN = (b"\x89PNG", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM")


def check_costs(media: list[Media]) -> MediaCost:
    """The media's cost as their decoders read the headers (Pillow's size, ``wave``'s frames),
    against the limits of one medium and of a request, before any is decoded; MediaError where
    one passes them. Returns the request's total."""
    costs = RequestCosts()
    try:
        for m in media:
            costs.add_cost(m.kind, header_cost(m))
    except MediaTooLarge as e:
        raise MediaError(str(e)) from None
    return costs.total


def header_cost(m: Media) -> MediaCost:
    """One medium's cost from its header as its decoder reads it; nothing where the decoder cannot
    read it (``decode_image`` / ``decode_wav`` then say why, before decoding anything). MediaError
    for a decompression bomb, and for a PNG, JPEG, GIF, WebP or BMP whose header
    ``runtime.media_costs`` cannot read in its bounded steps (Pillow would walk it a byte or a
    chunk at a time: 15 MB between a JPEG's segments took it 1.5 s)."""
    if m.kind == AUDIO:
        try:
            with wave.open(io.BytesIO(m.data)) as w:
                rate, frames = w.getframerate(), w.getnframes()
        except (wave.Error, EOFError, OSError, ValueError):
            return MediaCost()
        return MediaCost(0, frames / rate, f"{frames / rate:,.0f} s") if rate > 0 else MediaCost()
    from PIL import Image

    if m.data.startswith(_KNOWN) or (m.data[:4] == b"RIFF" and m.data[8:12] == b"WEBP"):
        if image_size(m.data) is None:
            raise MediaError("the image is damaged or truncated: its header could not be read (it ends early, or has "
                             "more segments before its pixels than an image has)")
    Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS
    try:
        with Image.open(io.BytesIO(m.data)) as im:
            w, h = im.size
    except Image.DecompressionBombError as e:
        raise MediaError(f"not an image that can be read: {e}") from None
    except Exception:  # noqa: BLE001 - decode_image says what is wrong with it
        return MediaCost()
    return MediaCost(w * h, 0.0, f"{w}x{h} pixels")


def decode_image(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and RGB bytes of an encoded image, its longest side at most ``MAX_SIDE``;
    MediaError for anything else."""
    from PIL import Image, UnidentifiedImageError

    Image.MAX_IMAGE_PIXELS = MAX_IMAGE_PIXELS  # above it Pillow warns (twice it: DecompressionBombError)
    try:
        with Image.open(io.BytesIO(data)) as im:
            w, h = im.size  # from the header: nothing is decoded yet
            if w <= 0 or h <= 0 or w * h > MAX_IMAGE_PIXELS:
                raise MediaError(f"the image is {w}x{h} pixels; the limit is {MAX_IMAGE_PIXELS:,} pixels an image")
            im.seek(0)  # an animation: its first frame
            if max(w, h) > MAX_SIDE:
                # a JPEG decodes at 1/2, 1/4 or 1/8 scale: the most it can that leaves MAX_SIDE / 2 or more
                # (a 48-megapixel photo at 4032 x 3024: a quarter of the memory and time)
                k = (MAX_SIDE // 2) / max(w, h)
                im.draft("RGB", (max(1, int(w * k)), max(1, int(h * k))))
            if im.mode in _SHRINK_FIRST:  # shrunk, then converted: no full-size copy
                if max(im.size) > MAX_SIDE:  # no projector looks at more: its preprocessing shrinks it anyway
                    im.thumbnail((MAX_SIDE, MAX_SIDE), Image.Resampling.BICUBIC)
                else:
                    im.load()
                rgb = im if im.mode == "RGB" else im.convert("RGB")
            else:
                rgb = im.convert("RGB")
                if max(rgb.size) > MAX_SIDE:
                    rgb.thumbnail((MAX_SIDE, MAX_SIDE), Image.Resampling.BICUBIC)
            return rgb.size[0], rgb.size[1], rgb.tobytes()
    except MediaError:
        raise
    except UnidentifiedImageError:  # its text names the in-memory file object (a heap address)
        raise MediaError(f"not an image that can be read: its {len(data):,} bytes start with {data[:8]!r}, which "
                         "is no image format this model reads (PNG, JPEG, GIF, BMP, WebP, ...)") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        raise MediaError(f"not an image that can be read: {e}") from None
    except (OSError, ValueError, SyntaxError, EOFError, MemoryError) as e:  # truncated or corrupt data
        raise MediaError(f"the image is damaged or truncated ({type(e).__name__}: {e})") from None


def decode_wav(data: bytes, rate: int) -> np.ndarray:
    """Mono float32 samples at ``rate`` Hz from a PCM WAV file; MediaError for anything else."""
    try:
        with wave.open(io.BytesIO(data)) as w:
            channels, width, src_rate, frames = w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()
            if not 1 <= channels <= 8 or width not in (1, 2, 3, 4) or not 1000 <= src_rate <= 384_000:
                raise MediaError(f"unsupported WAV: {channels} channels, {8 * width}-bit, {src_rate} Hz")
            if frames > MAX_AUDIO_SECONDS * src_rate:
                raise MediaError(f"the clip is {frames / src_rate:.0f} s; the limit is {MAX_AUDIO_SECONDS} s")
            raw = w.readframes(frames)
    except MediaError:
        raise
    except (wave.Error, EOFError, OSError, ValueError) as e:
        raise MediaError(f"audio must be a PCM WAV file ({e})") from None
    n = len(raw) // (width * channels)
    if n == 0:
        raise MediaError("the audio clip is empty")
    raw = raw[:n * width * channels]
    x: np.ndarray
    if width == 1:
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128) / 128
    elif width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        x = ((b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)) << 8 >> 8).astype(np.float32) / (1 << 23)
    else:
        dt = np.int16 if width == 2 else np.int32
        x = np.frombuffer(raw, dt).astype(np.float32) / float(1 << (8 * width - 1))
    x = x.reshape(n, channels).mean(axis=1)
    if src_rate != rate:
        t = np.arange(int(n * rate / src_rate)) * (src_rate / rate)
        x = np.interp(t, np.arange(n), x).astype(np.float32)
    return np.ascontiguousarray(x, dtype=np.float32)
