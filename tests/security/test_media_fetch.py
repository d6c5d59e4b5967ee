"""``--fetch-media-urls``: the service fetches images from public addresses only (the address
checked is the one connected to), only once the model is resolved and reads images, answers
every failure with one and the same message (no closed / open / non-HTTP oracle), and reads a
body whole up to the media limit (a 2.9 MB PNG was cut at what one read returned).

The pictures are served on 127.0.0.1; ``HEARTH_TEST_FETCH_LOOPBACK=1`` (test-only) lets the
service reach them where a test needs a fetch to succeed or to get past the address check."""

from __future__ import annotations

import asyncio
import base64
import io
import logging

import aiohttp
import numpy as np
import openai
import pytest
from aiohttp import web
from aiohttp.resolver import ThreadedResolver
from PIL import Image

from runtime.engine.messages import Loaded
from runtime.media import IMAGE, MAX_MEDIA_BYTES, Media
from runtime.server import media_fetch
from runtime.server.errors import ApiError
from runtime.server.launcher import free_port
from runtime.server.media_fetch import FETCH_FAILED, TEST_LOOPBACK_ENV, fetch_media, refused_address
from tests.remote.scripted import ScriptedUpstream
from tests.remote.test_faults import add, oai

VISION = Loaded(pid=1, n_ctx=512, max_request_tokens=512, media={"vision": True, "audio": False})


def big_png() -> bytes:
    """A valid PNG of about 2.9 MB (noise does not compress)."""
    im = Image.fromarray(np.random.default_rng(5).integers(0, 256, (990, 980, 3), dtype=np.uint8))
    buf = io.BytesIO()
    im.save(buf, "PNG", compress_level=1)
    return buf.getvalue()


BIG = big_png()


class Site:
    """A picture site on 127.0.0.1 that counts what it is asked and sends bodies in slow pieces."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.hosts: list[str] = []
        self.url = ""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/{name}", self.serve)
        return app

    async def serve(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        self.requests.append(name)
        self.hosts.append(request.headers.get("Host", ""))
        if name == "big.png":  # in pieces, with pauses: one read returns only what has arrived
            resp = web.StreamResponse(headers={"Content-Type": "image/png", "Content-Length": str(len(BIG))})
            await resp.prepare(request)
            for i in range(0, len(BIG), 256 << 10):
                await resp.write(BIG[i:i + (256 << 10)])
                await asyncio.sleep(0.01)
            await resp.write_eof()
            return resp
        if name == "small.png":
            return web.Response(body=_small(), content_type="image/png")
        if name == "huge.png":  # no Content-Length: only the read loop can stop it
            resp = web.StreamResponse()
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            for _ in range(MAX_MEDIA_BYTES // (1 << 20) + 2):
                await resp.write(b"\0" * (1 << 20))
            await resp.write_eof()
            return resp
        if name == "announced-huge.png":
            return web.Response(body=b"\0" * (MAX_MEDIA_BYTES + 1))
        if name == "to-private":
            raise web.HTTPFound("http://10.0.0.1/cat.png")
        if name == "to-metadata":
            raise web.HTTPFound("http://169.254.169.254/latest/meta-data/")
        if name.startswith("loop"):
            raise web.HTTPFound(f"/loop{len(self.requests)}")
        if name == "to-small":
            raise web.HTTPFound("/small.png")
        raise web.HTTPNotFound()


def _small() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture()
async def site(aiohttp_server):
    s = Site()
    server = await aiohttp_server(s.app(), host="127.0.0.1")
    s.url = str(server.make_url("")).rstrip("/")
    return s


@pytest.fixture()
def loopback_allowed(monkeypatch):
    monkeypatch.setenv(TEST_LOOPBACK_ENV, "1")


async def fetched(url: str, loaded=VISION) -> bytes:
    out = await fetch_media([Media(IMAGE, b"", url)], True, loaded)
    return out[0].data


async def refusal(url: str, loaded=VISION) -> ApiError:
    with pytest.raises(ApiError) as e:
        await fetched(url, loaded)
    return e.value


# --- (a) the address ----------------------------------------------------------------------------

@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.8.9.10", "::1", "0.0.0.0", "::", "10.1.2.3", "172.16.0.1", "192.168.1.1",
    "169.254.169.254", "fe80::1", "fc00::1", "fd12:3456::1", "224.0.0.1", "239.255.255.250", "ff02::1",
    "255.255.255.255", "240.0.0.1", "100.64.0.1", "192.0.2.1", "198.18.0.1", "2001:db8::1", "fec0::1",
    "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "64:ff9b::7f00:1", "64:ff9b::a00:1",
    "2002:7f00:1::1", "2002:a00:1::", "2001:0:4136:e378:8000:63bf:80ff:fffe", "::127.0.0.1",
])
def test_addresses_that_are_not_public_are_refused(address):
    assert refused_address(address) is not None


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "93.184.215.14", "2606:4700:4700::1111",
                                     "2a00:1450:4001:80b::200e", "::ffff:8.8.8.8"])
def test_public_addresses_pass(address):
    assert refused_address(address) is None


def test_the_test_override_lets_loopback_through_and_nothing_else(monkeypatch):
    monkeypatch.setenv(TEST_LOOPBACK_ENV, "1")
    assert refused_address("127.0.0.1") is None and refused_address("::1") is None
    assert refused_address("::ffff:127.0.0.1") is None
    for address in ("10.0.0.1", "169.254.169.254", "192.168.0.1", "0.0.0.0", "fe80::1"):
        assert refused_address(address) is not None


@pytest.mark.parametrize("where", ["http://127.0.0.1:{port}/small.png", "http://localhost:{port}/small.png",
                                   "http://0.0.0.0:{port}/small.png", "http://[::ffff:127.0.0.1]:{port}/small.png",
                                   "http://2130706433:{port}/small.png", "http://127.1:{port}/small.png",
                                   "http://0x7f.0.0.1:{port}/small.png"])
async def test_loopback_is_never_reached_in_any_spelling(site, where):
    port = site.url.rsplit(":", 1)[1]
    e = await refusal(where.format(port=port))
    assert e.status == 400 and e.message == FETCH_FAILED
    assert site.requests == []  # refused before a connection


async def test_the_resolved_address_is_checked_and_is_the_one_connected_to(site, monkeypatch):
    """A name is resolved once; the connection goes to the address that was checked, so a DNS
    answer that changes between a check and the connection (rebinding) has nothing to switch."""
    calls: list[str] = []

    async def resolve(self, host, port=0, family=0):
        calls.append(host)
        return [{"hostname": host, "host": "127.0.0.1", "port": port, "family": 2, "proto": 6, "flags": 0}]

    monkeypatch.setattr(ThreadedResolver, "resolve", resolve)
    port = site.url.rsplit(":", 1)[1]
    e = await refusal(f"http://pictures.example:{port}/small.png")
    assert e.message == FETCH_FAILED and site.requests == [] and calls == ["pictures.example"]

    monkeypatch.setenv(TEST_LOOPBACK_ENV, "1")  # the same answer, now allowed: fetched from that address
    calls.clear()
    assert await fetched(f"http://pictures.example:{port}/small.png") == _small()
    assert calls == ["pictures.example"] and site.hosts == [f"pictures.example:{port}"]


async def test_a_redirect_is_checked_like_the_first_address(site, loopback_allowed):
    for path in ("to-private", "to-metadata"):
        assert (await refusal(f"{site.url}/{path}")).message == FETCH_FAILED
    assert await fetched(f"{site.url}/to-small") == _small()


# --- (c) one answer for every failure -----------------------------------------------------------

async def _garbage_server() -> tuple[asyncio.AbstractServer, int]:
    """An open port that does not speak HTTP (an SSH-like banner, then the connection closes)."""
    async def talk(reader, writer):
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(talk, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _silent_server() -> tuple[asyncio.AbstractServer, int]:
    """An open port that accepts and never answers."""
    async def hold(reader, writer):
        await asyncio.sleep(30)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_every_failure_gets_one_and_the_same_answer_and_the_reason_is_logged(site, loopback_allowed,
                                                                                   monkeypatch, caplog):
    monkeypatch.setattr(media_fetch, "FETCH_TIMEOUT_S", 1.0)
    garbage, garbage_port = await _garbage_server()
    silent, silent_port = await _silent_server()
    try:
        urls = {
            "closed port": f"http://127.0.0.1:{free_port()}/x.png",
            "open, not HTTP": f"http://127.0.0.1:{garbage_port}/x.png",
            "open, silent": f"http://127.0.0.1:{silent_port}/x.png",
            "HTTP 404": f"{site.url}/missing.png",
            "too large, announced": f"{site.url}/announced-huge.png",
            "too large, chunked": f"{site.url}/huge.png",
            "redirect loop": f"{site.url}/loop",
            "private redirect": f"{site.url}/to-private",
            "ftp": "ftp://127.0.0.1/x.png",
            "credentials": f"http://user:secret@{site.url[7:]}/small.png",
        }
        answers = {}
        with caplog.at_level(logging.WARNING, logger="hearth.server"):
            for what, url in urls.items():
                e = await refusal(url)
                answers[what] = (e.status, e.message, e.code, e.param)
        assert set(answers.values()) == {(400, FETCH_FAILED, None, "image_url")}, answers
        logged = "\n".join(r.getMessage() for r in caplog.records)
        assert "HTTP 404" in logged and "Connect" in logged and "no answer within" in logged
        assert "secret" not in logged  # credentials and queries stay out of the log
    finally:
        garbage.close()
        silent.close()


async def test_without_the_override_loopback_answers_the_same(site):
    assert (await refusal(f"{site.url}/small.png")).message == FETCH_FAILED
    assert (await refusal(f"http://127.0.0.1:{free_port()}/x.png")).message == FETCH_FAILED
    assert site.requests == []


# --- (d) the whole body --------------------------------------------------------------------------

async def test_a_2_9_mb_png_sent_in_pieces_arrives_whole_and_decodes(site, loopback_allowed):
    data = await fetched(f"{site.url}/big.png")
    assert len(data) == len(BIG) > 2_800_000 and data == BIG
    with Image.open(io.BytesIO(data)) as im:
        im.load()  # a truncated file raises here
        assert im.size == (980, 990)


# --- (b) only once the model is resolved and reads images ----------------------------------------

@pytest.mark.parametrize("media, words", [(None, "text only"), ({"vision": False, "audio": True}, "no images")])
async def test_nothing_is_fetched_for_a_model_that_reads_no_images(site, loopback_allowed, media, words):
    text_only = Loaded(pid=1, n_ctx=512, max_request_tokens=512, media=media)
    e = await refusal(f"{site.url}/small.png", text_only)
    assert e.code == "media_not_supported" and words in e.message
    e = await refusal(f"{site.url}/small.png", None)  # nothing known about the model: nothing fetched
    assert e.code == "media_not_supported"
    assert site.requests == []


def _chat(model: str, url: str) -> dict:
    return {"model": model, "max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is it?"}, {"type": "image_url", "image_url": {"url": url}}]}]}


async def test_an_unknown_model_is_refused_before_anything_is_fetched(hearth, site, loopback_allowed):
    from runtime.config import SecurityConfig

    h = await hearth(security=SecurityConfig(fetch_media_urls=True))
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{h.url}/v1/chat/completions", json=_chat("no-such-model", f"{site.url}/small.png")) as r:
            assert r.status == 404, await r.text()
    assert site.requests == []


async def test_a_remote_model_gets_the_whole_picture_fetched_after_it_is_resolved(hearth, aiohttp_server, site,
                                                                                 loopback_allowed):
    from runtime.config import SecurityConfig

    up = ScriptedUpstream("ok", ["m1"])
    app = web.Application(client_max_size=64 << 20)  # the picture travels as base64
    app.router.add_get("/v1/models", up.list_models)
    app.router.add_post("/v1/chat/completions", up.generate)
    up.server = await aiohttp_server(app)
    h = await hearth(security=SecurityConfig(fetch_media_urls=True))
    await add(h, "box", up.url)
    reply = await oai(h).chat.completions.create(**_chat("m1", f"{site.url}/big.png"))
    assert reply.choices[0].message.content == "Hello world!"
    assert site.requests == ["big.png"]
    parts = up.requests[-1]["body"]["messages"][0]["content"]
    image = next(p for p in parts if p["type"] == "image_url")["image_url"]["url"]
    assert base64.b64decode(image.split(",", 1)[1]) == BIG

    with pytest.raises(openai.BadRequestError) as e:  # and a failure says what every failure says
        await oai(h).chat.completions.create(**_chat("m1", f"{site.url}/missing.png"))
    assert FETCH_FAILED in str(e.value)
