"""What images and audio cost is estimated from their headers before any work starts.

The finding: work was sized by the request, within the limits. 16 PNGs of 10,000 x 10,000
pixels cost 90 s of the worker and left +1.7 GiB in it; 16 WAV clips of 600 s cost 228 s.
Now each medium's pixels or seconds are read from its header in the service, while the body is
parsed, against a limit per image or clip, per request and per client (the media one client has
being prepared at once), and the worker decodes one image at a time into the projector's size
and gives the memory back. These run the real service (the embedded SmolLM2 beside a tiny
generated projector that reads images and audio) and real decoding."""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import struct
import sys
import threading
import time
import wave
import zlib
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from runtime.media import (
    AUDIO, IMAGE, MAX_AUDIO_SECONDS, MAX_IMAGE_PIXELS, MAX_REQUEST_AUDIO_SECONDS, MAX_REQUEST_PIXELS, Media,
)
from runtime.media_costs import MediaCost, MediaTooLarge, RequestCosts, estimate, image_size
from runtime.server.errors import ApiError
from runtime.server.media_budget import MediaBudget
from tests.media_models import write_projector
from tests.server.conftest import live_server

PHOTO_48MP = (8064, 6048)  # a 48-megapixel phone camera's photo


def png_of(w: int, h: int) -> bytes:
    """A complete, valid RGB PNG of ``w`` x ``h`` black pixels (it decodes to w * h * 3 bytes)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    row = bytes(1 + 3 * w)  # filter byte 0, then the row's pixels
    z = zlib.compressobj(6)
    idat = b"".join(z.compress(row) for _ in range(h)) + z.flush()
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


def photo_jpeg(size: tuple[int, int] = PHOTO_48MP, seed: int = 0) -> bytes:
    """A smooth photo-like JPEG of ``size`` (a few MB: it fits a request body beside others)."""
    small = np.random.default_rng(seed).integers(0, 256, (size[1] // 64, size[0] // 64, 3), dtype=np.uint8)
    im = Image.fromarray(small).resize(size, Image.Resampling.BILINEAR)
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=70)
    return buf.getvalue()


def wav_of(seconds: float, rate: int = 1000) -> bytes:
    """A mono 8-bit PCM WAV of ``seconds`` (600 s at 1 kHz is 600 kB: 16 of them fit one body)."""
    n = int(seconds * rate)
    x = (128 + 60 * np.sin(np.arange(n) * 0.3)).astype(np.uint8)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(rate)
        w.writeframes(x.tobytes())
    return buf.getvalue()


def data_url(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def images(*pictures: bytes, mime: str = "image/png") -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": "What is in these pictures?"}]
             + [{"type": "image_url", "image_url": {"url": data_url(p, mime)}} for p in pictures]}]


def clips(*sounds: bytes) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": "What do you hear?"}]
             + [{"type": "input_audio", "input_audio": {"data": base64.b64encode(s).decode(), "format": "wav"}}
                for s in sounds]}]


@pytest.fixture(scope="module")
def big_png() -> bytes:
    return png_of(10_000, 10_000)


@pytest.fixture(scope="module")
def photo() -> bytes:
    return photo_jpeg()


@pytest.fixture(scope="module")
def vlm(smollm2_path, tmp_path_factory):
    """The embedded SmolLM2 beside a tiny generated projector that reads images and audio."""
    folder = tmp_path_factory.mktemp("vlm-costs")
    model = folder / "SmolTiny-VL-Q8_0.gguf"
    try:
        os.link(smollm2_path, model)
    except OSError:
        shutil.copy(smollm2_path, model)
    write_projector(folder / "mmproj-SmolTiny-VL-f16.gguf", 576, vision="mlp", audio=True)
    s = live_server("--parallel", "2", "--ctx", "2048", "--models-dir", str(folder))
    s.vlm = str(model)
    # loaded, and the projector's buffers made, before anything is timed
    r = httpx.post(f"{s.url}/v1/chat/completions", timeout=300, json={
        "model": s.vlm, "max_tokens": 1, "messages": images(png_of(64, 48))})
    assert r.status_code == 200, r.text
    s.worker = s.health()["engine"]["pid"]
    s.worker_rss = _rss_mib(s.worker) if sys.platform.startswith("linux") else 0
    yield s
    s.stop()


def chat(server, messages: list[dict], timeout: float = 120, max_tokens: int = 1) -> tuple[httpx.Response, float]:
    t = time.perf_counter()
    r = httpx.post(f"{server.url}/v1/chat/completions", timeout=timeout,
                   json={"model": server.vlm, "max_tokens": max_tokens, "messages": messages})
    return r, time.perf_counter() - t


# -- the estimate, read from headers ------------------------------------------------------------
def _saved(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


@pytest.mark.parametrize("fmt, kw", [("PNG", {}), ("JPEG", {}), ("JPEG", {"progressive": True}), ("GIF", {}),
                                     ("BMP", {}), ("WEBP", {"lossless": True}), ("WEBP", {"quality": 50}),
                                     ("WEBP", {"save_all": True, "duration": 10})])
def test_the_header_gives_the_size_pillow_would_decode(fmt, kw):
    im = Image.new("RGB", (301, 173), (10, 200, 30))
    if kw.get("save_all"):
        kw = {**kw, "append_images": [Image.new("RGB", (301, 173), (0, 0, 0))]}
    data = _saved(im, fmt, **kw)
    assert image_size(data) == Image.open(io.BytesIO(data)).size == (301, 173)


def test_a_header_that_lies_is_read_as_pillow_reads_it(monkeypatch):
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # the sizes as Pillow reads them, bombs or not
    # a JPEG with a small frame header and a large one after it: Pillow takes the last
    small = _saved(Image.new("RGB", (16, 16)), "JPEG")
    sof = small.index(b"\xff\xc0")
    length = struct.unpack(">H", small[sof + 2:sof + 4])[0]
    segment = small[sof:sof + 2 + length]
    big = bytearray(segment)
    big[5:9] = struct.pack(">HH", 20_000, 30_000)  # height, width
    data = small[:sof + 2 + length] + bytes(big) + small[sof + 2 + length:]
    assert Image.open(io.BytesIO(data)).size == (30_000, 20_000)
    assert image_size(data) == (30_000, 20_000)
    # a GIF whose first frame reaches past its screen: Pillow grows the canvas to hold it
    gif = bytearray(_saved(Image.new("P", (8, 8)), "GIF"))
    desc = gif.index(b",", 13 + 3 * 2 ** ((gif[10] & 7) + 1))
    gif[desc + 5:desc + 9] = struct.pack("<HH", 40_000, 9_000)
    assert Image.open(io.BytesIO(bytes(gif))).size == image_size(bytes(gif)) == (40_000, 9_000)


def test_what_the_header_cannot_size_counts_as_the_largest_image():
    assert estimate(Media(IMAGE, b"II*\x00" + b"\0" * 100)).pixels == MAX_IMAGE_PIXELS  # a TIFF: not read here
    assert estimate(Media(IMAGE, b"\x89PNG\r\n\x1a\n")).pixels == MAX_IMAGE_PIXELS  # cut before its IHDR
    assert estimate(Media(AUDIO, wav_of(90.0))) == MediaCost(0, 90.0)
    assert estimate(Media(AUDIO, b"RIFF junk")) == MediaCost()  # no WAV file: the worker refuses it unread
    riff = wav_of(1.0)
    many = riff[:12] + b"LIST\x00\x00\x00\x00" * 2000 + riff[12:]  # more chunks than a WAV file has
    assert estimate(Media(AUDIO, many)) == MediaCost(0, MAX_AUDIO_SECONDS)


def test_a_header_that_pillow_would_walk_a_byte_at_a_time_is_refused_before_it_does():
    from runtime.backends.media import MediaError, header_cost

    jpeg = _saved(Image.new("RGB", (100, 80)), "JPEG")
    end = 4 + struct.unpack(">H", jpeg[4:6])[0]  # after the first segment
    padded = jpeg[:end] + bytes(15 << 20) + jpeg[end:]  # Pillow steps over these in 1.5 s
    assert estimate(Media(IMAGE, padded)).pixels == MAX_IMAGE_PIXELS
    t = time.perf_counter()
    with pytest.raises(MediaError, match="damaged or truncated"):
        header_cost(Media(IMAGE, padded))
    assert time.perf_counter() - t < 0.1
    assert header_cost(Media(IMAGE, jpeg)) == MediaCost(8000, 0.0)


def test_a_48_megapixel_photo_fits_one_image_and_four_fit_a_request(photo):
    costs = RequestCosts()
    for _ in range(4):
        costs.add(Media(IMAGE, photo))
    assert costs.total.pixels == 4 * PHOTO_48MP[0] * PHOTO_48MP[1] <= MAX_REQUEST_PIXELS
    with pytest.raises(MediaTooLarge, match="pixels a request"):
        costs.add(Media(IMAGE, photo))


def test_the_estimate_is_cheap_for_the_largest_body(big_png, photo):
    media = [Media(IMAGE, big_png if i % 2 else photo) for i in range(16)]
    t = time.perf_counter()
    for _ in range(10):
        for m in media:
            estimate(m)
    assert (time.perf_counter() - t) / 10 < 0.01  # 16 media: well under 10 ms on the event loop


# -- the worker: one image at a time, and the memory given back ----------------------------------
def _rss_mib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/status")
def test_the_worker_gives_back_the_memory_of_large_images(vlm, photo):
    # four PNGs of 49 megapixels (147 MB each decoded) and four 48 MP photos: the worker kept
    # 630 and 535 MiB of them before; now what one image took is given back after each request
    for pictures, mime in (([png_of(7000 - i, 7000) for i in range(4)], "image/png"), ([photo] * 4, "image/jpeg")):
        r, _ = chat(vlm, images(*pictures, mime=mime))
        assert r.status_code == 200, r.text[:300]
        grown = _rss_mib(vlm.worker) - vlm.worker_rss
        assert grown < 150, f"the worker kept {grown} MiB after four {mime} images of 48 megapixels"


# -- per request: refused in the service, before any decoding ------------------------------------
def test_sixteen_100_megapixel_pngs_are_refused_at_once_without_decoding(vlm, big_png):
    r, took = chat(vlm, images(*[big_png] * 16))
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    assert error["code"] == "invalid_media" and error["param"] == "messages[0].content[1].image_url.url"
    assert "10000x10000" in error["message"] and f"{MAX_IMAGE_PIXELS:,}" in error["message"]
    assert took < 1.0, took  # decoding one of them takes seconds


def test_a_48_megapixel_photo_is_read(vlm, photo):
    r, _ = chat(vlm, images(photo, mime="image/jpeg"))
    assert r.status_code == 200, r.text[:300]
    assert r.json()["usage"]["prompt_tokens"] > 16


def test_sixteen_ten_minute_clips_are_refused_by_the_request_limit(vlm):
    clip = wav_of(MAX_AUDIO_SECONDS)
    r, took = chat(vlm, clips(*[clip] * 16))
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    # one clip of ten minutes fits; the second passes the request's total
    assert error["code"] == "invalid_media" and error["param"] == "messages[0].content[2].input_audio.data"
    assert f"{MAX_REQUEST_AUDIO_SECONDS} s" in error["message"]
    assert took < 1.0, took


def test_images_over_the_request_total_are_refused_naming_the_first_that_passes_it(vlm, photo):
    r, took = chat(vlm, images(*[photo] * 5, mime="image/jpeg"))
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    assert error["param"] == "messages[0].content[5].image_url.url" and "pixels a request" in error["message"]
    assert took < 1.0, took


# -- per client: what one client has being prepared at once --------------------------------------
def test_the_client_budget_refuses_the_second_heavy_request_of_one_client_only():
    budget = MediaBudget(pixels=MAX_REQUEST_PIXELS, seconds=MAX_REQUEST_AUDIO_SECONDS)
    heavy = MediaCost(4 * PHOTO_48MP[0] * PHOTO_48MP[1], 0.0)
    budget.take("client-a", heavy)
    with pytest.raises(ApiError) as e:
        budget.take("client-a", heavy)
    assert e.value.status == 429 and e.value.code == "client_media_budget" and e.value.headers["Retry-After"]
    with pytest.raises(ApiError):
        budget.take("client-a", MediaCost(0, 1.0) + MediaCost(MAX_REQUEST_PIXELS, 0.0))
    budget.take("client-b", heavy)  # another client's is its own
    budget.take("client-a", MediaCost())  # a request without media is never refused
    budget.take("client-a", MediaCost(0, MAX_REQUEST_AUDIO_SECONDS))  # audio has its own share
    budget.give("client-a", heavy)
    budget.take("client-a", heavy)  # its first is done: the next one is taken
    budget.give("client-a", heavy)
    budget.give("client-a", MediaCost(0, MAX_REQUEST_AUDIO_SECONDS))
    budget.give("client-b", heavy)
    assert budget.stats()["clients"] == 0 and budget.stats()["refused"] == 2


def test_one_client_gets_429_for_a_second_heavy_request_while_its_first_is_prepared(vlm, photo):
    first: dict = {}

    def heavy() -> None:
        first["r"], first["took"] = chat(vlm, images(*[photo] * 4, mime="image/jpeg"))

    t = threading.Thread(target=heavy)
    t.start()
    time.sleep(0.4)  # the first is received and being decoded (it takes seconds)
    second, took = chat(vlm, images(photo, mime="image/jpeg"))
    t.join()
    assert first["r"].status_code == 200, first["r"].text[:300]
    assert first["took"] > took  # still prepared when the second came
    assert second.status_code == 429, second.text[:300]
    assert second.json()["error"]["code"] == "client_media_budget" and second.headers["Retry-After"]
    r, _ = chat(vlm, images(photo, mime="image/jpeg"))  # once it is done, the next one is taken
    assert r.status_code == 200, r.text[:300]


def test_while_one_client_sends_the_heaviest_media_health_and_another_request_stay_fast(vlm, photo, big_png):
    stop = threading.Event()
    answers: list[int] = []

    def attack(messages: list[dict]) -> None:
        # the body serialized once: the attacking threads wait on the service, not on this
        # process's interpreter, which times the other requests
        body = json.dumps({"model": vlm.vlm, "max_tokens": 1, "messages": messages}).encode()
        with httpx.Client(timeout=120) as client:
            while not stop.is_set():
                r = client.post(f"{vlm.url}/v1/chat/completions", content=body,
                                headers={"Content-Type": "application/json"})
                answers.append(r.status_code)

    attackers = [threading.Thread(target=attack, args=(m,)) for m in (
        images(*[photo] * 4, mime="image/jpeg"), images(*[big_png] * 16), clips(*[wav_of(MAX_AUDIO_SECONDS)] * 16),
        clips(wav_of(MAX_AUDIO_SECONDS)))]
    for a in attackers:
        a.start()
    health, replies = [], []
    try:
        time.sleep(1.0)
        with httpx.Client(timeout=30) as other:  # another client, on a connection it keeps
            for _ in range(8):
                t = time.perf_counter()
                assert other.get(f"{vlm.url}/health").status_code == 200
                health.append(time.perf_counter() - t)
                t = time.perf_counter()
                r = other.post(f"{vlm.url}/v1/chat/completions", json={
                    "model": vlm.vlm, "max_tokens": 1, "messages": [{"role": "user", "content": "Say hi."}]})
                assert r.status_code == 200, r.text[:300]
                replies.append(time.perf_counter() - t)
                time.sleep(0.2)
    finally:
        stop.set()
        for a in attackers:
            a.join()
    assert max(health) < 0.25, health
    assert max(replies) < 2.0, replies
    assert 200 in answers and 400 in answers  # the heavy ones ran, the oversized ones were refused
