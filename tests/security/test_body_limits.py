"""The rules of ``runtime.server.bodies`` and the guard's minimum body rate one by one, on the
service's app in this process behind the ``GuardedRunner`` (real sockets on 127.0.0.1), with
small limits: a body kept up above the minimum rate is read however long it takes, a burst then a
drip gets 408 in the API's error shapes, a body nobody reads is closed, bodies of unknown length
take the budget as they come, and the budget's arithmetic."""

from __future__ import annotations

import asyncio
import json
import time
import zlib

import pytest
from aiohttp import web

from runtime.config import SecurityConfig, ServeConfig
from runtime.server.app import create_app
from runtime.server.bodies import BUDGET, FREE_BYTES, BodyBudget, budget_of
from runtime.server.client_identity import identity_of
from runtime.server.connections import GuardedRunner, limits_of
from runtime.server.errors import ApiError

KiB, MiB = 1024, 2**20


async def _service(**security):
    """The app with these security settings (1 s grace, 32 KiB/s unless said), a route that never
    reads its body, and the guard's runner; (runner, port)."""
    config = ServeConfig(preload=False, security=SecurityConfig(**{"body_timeout": 1.0, "body_min_rate": 32 * KiB,
                                                                    **security}))
    app = create_app(config)

    async def never_reads(request: web.Request) -> web.Response:
        await asyncio.sleep(30)
        return web.json_response({})

    app.router.add_post("/test/never-reads", never_reads)
    runner = GuardedRunner(app, limits_of(config.security), handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]


async def _answer(r: asyncio.StreamReader, within: float = 10) -> tuple[int | None, bytes]:
    """(status, body) of one response, or (None, b"") when the connection was closed without one."""
    try:
        head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), within)
    except (asyncio.IncompleteReadError, ConnectionError, OSError):
        return None, b""
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    return int(head.split(b" ", 2)[1]), await asyncio.wait_for(r.readexactly(length), 5)


def _head(path: str, length: int | None, extra: bytes = b"") -> bytes:
    framing = b"Content-Length: %d\r\n" % length if length is not None else b"Transfer-Encoding: chunked\r\n"
    return (b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" % path.encode()
            + framing + extra + b"\r\n")


async def test_a_body_kept_above_the_minimum_rate_is_read_however_long_it_takes():
    """64 KiB/s for 3.5 s (three times the grace, twice the minimum rate): read whole, then
    refused for what it says (400), not for how it came."""
    runner, port = await _service()
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        body = b'{"x": "' + b"a" * (224 * KiB) + b'"}'
        w.write(_head("/v1/chat/completions", len(body)))
        answer = asyncio.ensure_future(_answer(r, 30))
        t0 = time.monotonic()
        for i in range(0, len(body), 8 * KiB):
            w.write(body[i:i + 8 * KiB])
            await w.drain()
            await asyncio.sleep(0.125)
        status, text = await answer
        assert time.monotonic() - t0 > 3 and status == 400 and b"messages" in text, text
        assert runner.guard.closed["body_slow"] == 0 and runner.guard.closed["body_stalled"] == 0
        w.close()
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/chat", "/v1/messages"])
async def test_a_burst_then_a_drip_gets_408_in_the_routes_error_shape(path):
    """All of a body but a little at once buys no time: a byte every 0.3 s after it (never still for
    the 1 s stall timer) falls 1 s behind the minimum rate and gets 408 within about 2 s."""
    runner, port = await _service()
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(_head(path, MiB) + b'{"x": "' + b"a" * (MiB - 64 * KiB))
        await w.drain()
        answer = asyncio.ensure_future(_answer(r, 10))
        t0 = time.monotonic()
        while not answer.done() and time.monotonic() - t0 < 8:
            await asyncio.wait([answer], timeout=0.3)
            if not answer.done():
                w.write(b"a")
        status, text = await answer
        took = time.monotonic() - t0
        assert status == 408 and took < 4, (status, took, text)
        error = json.loads(text)
        if path.startswith("/api/"):
            assert "too slowly" in error["error"]  # Ollama's shape
        elif path == "/v1/messages":
            assert error["type"] == "error" and "too slowly" in error["error"]["message"]
        else:
            assert error["error"]["code"] == "body_too_slow" and "KiB/s" in error["error"]["message"]
        assert await asyncio.wait_for(r.read(), 3) == b""  # and the connection is closed after the answer
        assert runner.guard.closed["body_slow"] == 1
        assert runner.app[BUDGET].used == 0  # what it held was let go
        w.close()
    finally:
        await runner.cleanup()


async def test_a_dripped_body_nobody_reads_is_closed_a_sweep_after_its_408():
    runner, port = await _service()
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(_head("/test/never-reads", 1000) + b"{")
        t0 = time.monotonic()
        closed = asyncio.ensure_future(r.read())
        while not closed.done() and time.monotonic() - t0 < 8:
            await asyncio.wait([closed], timeout=0.3)
            if not closed.done():
                w.write(b" ")
        assert closed.done() and time.monotonic() - t0 < 5.5
        w.close()
    finally:
        await runner.cleanup()


async def test_a_chunked_body_takes_the_budget_as_it_comes_and_is_refused_past_it():
    """No length to take before reading: the body's bytes are taken as they come, so a chunked body
    past the client's share gets 429 mid-way, and one past the body limit gets 413."""
    runner, port = await _service(max_body_bytes=4 * MiB, body_budget_bytes=16 * MiB, client_body_bytes=4 * MiB)
    try:
        budget: BodyBudget = runner.app[BUDGET]
        r, w = await asyncio.open_connection("127.0.0.1", port)
        sock = w.get_extra_info("socket")
        me = identity_of(sock.getsockname(), sock.getpeername())  # the client the service sees this as
        budget.take(me, 2 * MiB)  # this client already has a body arriving
        w.write(_head("/v1/chat/completions", None))
        piece = b"a" * (256 * KiB)
        answer = asyncio.ensure_future(_answer(r, 10))
        for _ in range(16):
            if answer.done():
                break
            w.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await w.drain()
            await asyncio.sleep(0.01)
        status, text = await answer
        assert status == 429 and json.loads(text)["error"]["code"] == "client_body_budget", text
        w.close()
        budget.give(me, 2 * MiB)
        assert budget.used == 0

        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(_head("/v1/chat/completions", None))
        answer = asyncio.ensure_future(_answer(r, 10))
        for _ in range(24):
            if answer.done():
                break
            w.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await w.drain()
        status, text = await answer
        assert status == 413 and json.loads(text)["error"]["code"] == "body_too_large", text
        assert budget.used == 0
        w.close()
    finally:
        await runner.cleanup()


async def test_a_compressed_body_is_limited_by_what_it_inflates_to():
    """A deflate body of 20 KiB that inflates to 5 MiB against a 4 MiB limit: 413, and the rest is
    not inflated to be dropped (the connection is closed after the answer)."""
    runner, port = await _service(max_body_bytes=4 * MiB)
    try:
        body = zlib.compress(b'{"x": "' + b"a" * (5 * MiB) + b'"}', 9)
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(_head("/v1/chat/completions", len(body), b"Content-Encoding: deflate\r\n") + body)
        status, text = await _answer(r)
        assert status == 413 and b"inflates (deflate)" in text, text
        assert await asyncio.wait_for(r.read(), 3) == b""
        assert runner.app[BUDGET].used == 0
        w.close()
    finally:
        await runner.cleanup()


def test_the_budget_refuses_a_clients_excess_with_429_and_the_services_with_503():
    budget = BodyBudget(total=10 * MiB, per_client=6 * MiB)
    budget.take("a", 5 * MiB)
    with pytest.raises(ApiError) as e:
        budget.take("a", 2 * MiB)
    assert e.value.status == 429 and e.value.code == "client_body_budget" and e.value.headers["Retry-After"] == "1"
    budget.take("b", 5 * MiB)
    with pytest.raises(ApiError) as e:
        budget.take("c", 1)
    assert e.value.status == 503 and e.value.code == "body_budget"
    budget.give("a", 5 * MiB)
    budget.take("c", 5 * MiB)
    assert budget.used == 10 * MiB and set(budget.clients) == {"b", "c"}
    assert budget.stats()["refused"] == {"client_body_budget": 1, "body_budget": 1}


def test_the_budget_has_room_for_one_body_of_the_limit_whatever_it_is_set_to():
    small = budget_of(SecurityConfig(max_body_bytes=32 * MiB, body_budget_bytes=MiB, client_body_bytes=0))
    assert small.total == small.per_client == 32 * MiB - FREE_BYTES
    default = budget_of(SecurityConfig())
    assert (default.total, default.per_client) == (256 * MiB, 128 * MiB)
