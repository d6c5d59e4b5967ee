"""Secrets, destinations and what comes back from them: only the user introduces an upstream or
names an environment variable to send; whatever answers at an address is never repeated to a
client; every read of an upstream's answer is capped; a prompt goes to an upstream only under
a name the user chose for it. Real servers on 127.0.0.1 play the hostile parts."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os

import aiohttp
import psutil
import pytest

from runtime.config import SecurityConfig
from tests.remote.test_faults import CHAT, FAST, add, confirmed, post

SECRET = "SECRET-7f3a9c"
HEALTH_MS = 250.0


class HealthWatch:
    """GET /health every 50 ms while an attack runs (on the service's own loop: a handler that
    held the loop would stall it); ``slowest_ms`` and ``errors`` afterwards."""

    def __init__(self, url: str) -> None:
        self.url, self.latencies, self.errors = url, [], 0
        self._task: asyncio.Task | None = None

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        async with aiohttp.ClientSession() as s:
            while True:
                t0 = loop.time()
                try:
                    async with s.get(f"{self.url}/health") as r:
                        await r.read()
                        ok = r.status == 200
                except aiohttp.ClientError:
                    ok = False
                self.latencies.append((loop.time() - t0) * 1000) if ok else None
                self.errors += 0 if ok else 1
                await asyncio.sleep(0.05)

    async def __aenter__(self) -> "HealthWatch":
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        print(json.dumps({"health_probes": len(self.latencies), "health_max_ms": round(self.slowest_ms, 1)}))

    @property
    def slowest_ms(self) -> float:
        return max(self.latencies, default=0.0)


class Listener:
    """A TCP server on 127.0.0.1 that counts connections and answers each with ``reply`` (bytes,
    or a coroutine function of (reader, writer))."""

    def __init__(self, reply) -> None:
        self.reply, self.connections, self.received = reply, 0, b""
        self.server: asyncio.base_events.Server | None = None

    async def start(self) -> "Listener":
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            if callable(self.reply):
                await self.reply(reader, writer)
            else:
                self.received += await asyncio.wait_for(reader.read(65536), 2)
                writer.write(self.reply)
                await writer.drain()
        except (ConnectionError, asyncio.TimeoutError):
            pass
        finally:
            writer.close()

    async def close(self) -> None:
        self.server.close()


@pytest.fixture()
async def listeners():
    made: list[Listener] = []

    async def make(reply) -> Listener:
        made.append(await Listener(reply).start())
        return made[-1]

    yield make
    for lst in made:
        await lst.close()


def _http(status: int, body: bytes, headers: str = "") -> bytes:
    return (f"HTTP/1.1 {status} X\r\nContent-Length: {len(body)}\r\n{headers}Connection: close\r\n\r\n").encode() + body


async def _add_raw(h, body: dict, headers: dict | None = None) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{h.url}/hearth/remotes", json=body, headers=headers or {}) as r:
            return r.status, await r.json()


# -- only the user introduces a destination or a secret ---------------------------------------
@pytest.mark.parametrize("var", ["HOME", "AWS_SECRET_ACCESS_KEY", "HEARTH_API_KEY", "PATH"])
async def test_an_api_caller_cannot_name_an_environment_variable_to_send(hearth, listeners, monkeypatch, var):
    monkeypatch.setenv(var, SECRET)
    catcher = await listeners(_http(200, b'{"data": []}'))
    h = await hearth()
    status, body = await _add_raw(h, {"name": "x", "url": catcher.url, "key_env": var})
    assert status == 403 and body["error"]["code"] == "remote_not_confirmed"
    keyed = await hearth(security=SecurityConfig(api_key="hearth-key-0123456789"))
    status, body = await _add_raw(keyed, {"name": "x", "url": catcher.url, "key_env": var},
                                  {"Authorization": "Bearer hearth-key-0123456789"})
    assert status == 403 and body["error"]["code"] == "key_env_not_confirmed"  # the API key is not enough
    assert catcher.connections == 0 and SECRET.encode() not in catcher.received
    status, body = await _add_raw(h, {"name": "x", "url": catcher.url, "key_env": var}, confirmed(h))
    assert status == 201  # the user's own app may: the key then comes from the service's environment


@pytest.mark.parametrize("url", ["http://127.0.0.1:{port}", "http://localhost:{port}/v1", "http://[::1]:{port}"])
async def test_adding_or_removing_an_upstream_needs_the_users_confirmation(hearth, listeners, url):
    catcher = await listeners(_http(200, b'{"data": [{"id": "m1"}]}'))
    port = catcher.url.rsplit(":", 1)[1]
    h = await hearth()
    for headers in ({}, {"X-Hearth-Confirm-Import": "a guess"}, {"Origin": "http://localhost:5173"}):
        status, body = await _add_raw(h, {"name": "x", "url": url.format(port=port)}, headers)
        assert status == 403 and body["error"]["code"] == "remote_not_confirmed", body
    assert catcher.connections == 0  # nothing was contacted on an unconfirmed word
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{h.url}/hearth/remotes") as r:
            assert (await r.json())["upstreams"] == []


# -- what answers at an address is never repeated -------------------------------------------------
BANNERS = {
    "ssh": f"SSH-2.0-OpenSSH_9.6 {SECRET}\r\n".encode(),
    "smtp": f"220 mail.internal ESMTP {SECRET}\r\n".encode(),
    "500": _http(500, json.dumps({"error": {"message": SECRET}}).encode()),
    "404 text": _http(404, f"<html>{SECRET}</html>".encode()),
    "200 not json": _http(200, f"{SECRET} {SECRET}".encode()),
    "200 wrong json": _http(200, json.dumps({"models": SECRET}).encode()),
    "garbage status": f"HTTP/1.1 2x0 {SECRET}\r\n\r\n".encode(),
}


@pytest.mark.parametrize("kind", list(BANNERS))
async def test_adding_an_upstream_never_echoes_what_answers_there(hearth, listeners, kind):
    target = await listeners(BANNERS[kind])
    h = await hearth()
    status, body = await _add_raw(h, {"name": "probe", "url": target.url, "timeouts": FAST}, confirmed(h))
    assert status == 201 and body["error"], body
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{h.url}/hearth/remotes") as r:
            listing = await r.text()
        async with s.post(f"{h.url}/hearth/remotes/probe/refresh") as r:
            refreshed = await r.text()
        async with s.get(f"{h.url}/health") as r:
            health = await r.text()
    for text in (json.dumps(body), listing, refreshed, health):
        assert SECRET not in text and "OpenSSH" not in text and "ESMTP" not in text, text


async def test_a_redirect_is_not_followed(hearth, listeners):
    inner = await listeners(_http(200, json.dumps({"data": [{"id": SECRET}]}).encode()))
    outer = await listeners(_http(302, b"", f"Location: {inner.url}/v1/models\r\n"))
    h = await hearth()
    status, body = await _add_raw(h, {"name": "hop", "url": outer.url, "timeouts": FAST}, confirmed(h))
    assert status == 201 and "redirect" in body["error"] and body["models"] == []
    assert inner.connections == 0


async def test_generation_errors_never_echo_the_upstreams_words(hearth, scripted, listeners):
    async def models_then(reply: bytes):
        async def serve(reader, writer):
            head = await reader.readuntil(b"\r\n\r\n")
            if head.startswith(b"GET"):
                writer.write(_http(200, b'{"data": [{"id": "m1"}]}'))
            else:
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                await reader.readexactly(length)
                writer.write(reply)
            await writer.drain()
        return await listeners(serve)

    h = await hearth()
    for i, reply in enumerate([
            _http(400, json.dumps({"error": {"message": SECRET}}).encode()),
            _http(401, SECRET.encode()), _http(502, SECRET.encode()),
            _http(200, f"data: {{\"error\": {{\"message\": \"{SECRET}\"}}}}\n\n".encode(),
                  "Content-Type: text/event-stream\r\n"),
            _http(200, f"data: {SECRET}\n\n".encode(), "Content-Type: text/event-stream\r\n"),
            _http(200, f"{SECRET}: nonsense\n\n".encode(), "Content-Type: text/event-stream\r\n")]):
        up = await models_then(reply)
        await add(h, f"u{i}", up.url, plain_names=False)
        status, _, body = await post(h, "/v1/chat/completions", {**CHAT, "model": f"m1@u{i}"})
        assert status >= 400 and SECRET not in json.dumps(body), (i, body)
        status, _, body = await post(h, "/api/chat", {"model": f"m1@u{i}", "messages": CHAT["messages"],
                                                       "stream": False})
        assert status >= 400 and SECRET not in json.dumps(body), (i, body)


# -- every read of an answer is capped ----------------------------------------------------------
async def _endless(writer: asyncio.StreamWriter, piece: bytes, limit: int) -> None:
    sent = 0
    while sent < limit:
        writer.write(piece)
        await writer.drain()
        sent += len(piece)


async def test_a_huge_model_list_or_error_body_is_not_read_whole(hearth, listeners):
    big = 200 * 2**20

    async def huge_list(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"data": [')
        await _endless(writer, b'{"id": "m"},' * 4096, big)

    async def huge_chunked_error(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 500 X\r\nTransfer-Encoding: chunked\r\n\r\n")
        await _endless(writer, b"10000\r\n" + b"e" * 0x10000 + b"\r\n", big)

    me = psutil.Process(os.getpid())
    h = await hearth()
    for name, reply in (("list", huge_list), ("error", huge_chunked_error)):
        target = await listeners(reply)
        before = me.memory_info().rss
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        async with HealthWatch(h.url) as watch:
            status, body = await _add_raw(h, {"name": name, "url": target.url,
                                              "timeouts": {"connect": 1, "first_byte": 5, "idle": 5}}, confirmed(h))
        assert status == 201 and body["error"] and loop.time() - t0 < 5, body
        assert me.memory_info().rss - before < 48 * 2**20
        assert watch.errors == 0 and watch.slowest_ms < HEALTH_MS


@pytest.mark.parametrize("stream", ["one endless line", "one endless event", "endless small events"])
async def test_a_streamed_answer_is_capped(hearth, listeners, stream, monkeypatch):
    # the whole-stream cap is 64 MiB; 8 MiB here keeps the test short (64k events take minutes)
    monkeypatch.setattr("runtime.remote.wire.MAX_STREAM_BYTES", 8 * 2**20)
    piece = {"one endless line": b"x" * 65536,
             "one endless event": b"data: " + b"x" * 1000 + b"\n",
             "endless small events": b'data: {"choices": [{"delta": {"content": "%s"}, "finish_reason": null}]}\n\n'
                                     % (b"x" * 2000)}

    async def serve(reader, writer):
        head = await reader.readuntil(b"\r\n\r\n")
        if head.startswith(b"GET"):
            writer.write(_http(200, b'{"data": [{"id": "m1"}]}'))
            await writer.drain()
            return
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
        if stream == "one endless line":
            writer.write(b"data: ")
        await _endless(writer, piece[stream], 300 * 2**20)

    target = await listeners(serve)
    h = await hearth()
    await add(h, "flood", target.url, plain_names=False, timeouts={"connect": 1, "first_byte": 10, "idle": 10})
    me = psutil.Process(os.getpid())
    before = me.memory_info().rss
    tail = b""
    async with HealthWatch(h.url) as watch, aiohttp.ClientSession() as s:
        async with s.post(f"{h.url}/v1/chat/completions", json={**CHAT, "model": "m1@flood", "stream": True,
                                                                 "max_tokens": 16384}) as r:
            async with asyncio.timeout(90):
                async for piece in r.content.iter_any():  # kept short: this process is the service too
                    tail = (tail + piece)[-2000:]
    assert b"longer than" in tail, tail[-300:]
    assert me.memory_info().rss - before < 96 * 2**20
    assert watch.errors == 0 and watch.slowest_ms < HEALTH_MS


# -- a prompt leaves only under a name the user chose -----------------------------------------
async def test_a_model_an_upstream_lists_is_not_sent_there_by_its_plain_name(hearth, scripted):
    up = await scripted("ok", models=["m1", "smollm2-360m", "Qwen/Qwen2.5-7B-Instruct"])
    h = await hearth()
    await add(h, "box", up.url, plain_names=False)
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{h.url}/v1/models") as r:
            ids = {m["id"] for m in (await r.json())["data"]}
    assert {"m1@box", "smollm2-360m@box", "Qwen/Qwen2.5-7B-Instruct@box"} <= ids and "m1" not in ids
    async with HealthWatch(h.url) as watch:
        for model in ("m1", "smollm2-360m", "Qwen/Qwen2.5-7B-Instruct"):
            status, _, body = await post(h, "/v1/chat/completions", {**CHAT, "model": model})
            assert status == 404 and f"{model}@box" in body["error"]["message"], body
            status, _, body = await post(h, "/api/chat", {"model": model, "messages": CHAT["messages"],
                                                          "stream": False})
            assert status == 404 and f"{model}@box" in body["error"], body
            status, _, body = await post(h, "/v1/messages", {"model": model, "max_tokens": 8,
                                                             "messages": CHAT["messages"]})
            assert status == 404, body
            status, _, body = await post(h, "/v1/responses", {"model": model, "input": "Hi"})
            assert status == 404, body
    assert up.requests == []  # not one prompt left
    assert watch.errors == 0 and watch.slowest_ms < HEALTH_MS
    status, _, body = await post(h, "/v1/chat/completions", {**CHAT, "model": "m1@box"})
    assert status == 200 and len(up.requests) == 1


async def test_an_upstream_the_user_let_serve_plain_names_gets_them(hearth, scripted):
    chosen, other = await scripted("ok", models=["m1"]), await scripted("ok", models=["m1", "m2"])
    h = await hearth()
    await add(h, "chosen", chosen.url, plain_names=True)
    await add(h, "other", other.url, plain_names=False)
    status, _, _ = await post(h, "/v1/chat/completions", CHAT)
    assert status == 200 and len(chosen.requests) == 1 and other.requests == []
    status, _, body = await post(h, "/v1/chat/completions", {**CHAT, "model": "m2"})
    assert status == 404 and "m2@other" in body["error"]["message"] and other.requests == []


async def test_an_unknown_name_that_no_upstream_lists_keeps_the_local_answer(hearth, scripted):
    up = await scripted("ok", models=["m1"])
    h = await hearth()
    await add(h, "box", up.url, plain_names=False)
    status, _, body = await post(h, "/v1/chat/completions", {**CHAT, "model": "smollm2-360m"})
    assert status == 404 and "hearth pull" in body["error"]["message"] and "@box" not in body["error"]["message"]
