"""Streams that wait (a long prompt being read) send keep-alives, and only while they wait."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from runtime.server import sse


def _app(keepalive: bytes, wait: float, interval: float) -> web.Application:
    async def slow(request: web.Request) -> web.StreamResponse:
        response = sse.EventStream(keepalive, interval)
        await response.prepare(request)
        await response.write(sse.frame({"type": "start"}))
        await asyncio.sleep(wait)  # the prompt being computed
        for i in range(3):
            await response.write(sse.frame({"type": "token", "i": i}))
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/", slow)
    return app


async def test_silence_is_filled_with_keepalives(aiohttp_client):
    client = await aiohttp_client(_app(sse.COMMENT, wait=1.0, interval=0.2))
    r = await client.get("/")
    arrivals: list[tuple[float, bytes]] = []
    start = time.monotonic()
    async for chunk in r.content.iter_any():
        arrivals.append((time.monotonic() - start, chunk))
    body = b"".join(c for _, c in arrivals)
    assert body.count(sse.COMMENT) >= 3  # about one per 0.2 s of the 1 s wait
    times = [t for t, _ in arrivals]
    assert max(b - a for a, b in zip(times, times[1:])) < 0.6
    tokens = body.split(b'"type":"token"')
    assert len(tokens) == 4 and sse.COMMENT not in b"".join(tokens[1:])  # none once tokens flow


async def test_anthropic_streams_ping_and_parsers_skip_the_comment(aiohttp_client):
    ping = sse.frame({"type": "ping"}, "ping")
    client = await aiohttp_client(_app(ping, wait=0.5, interval=0.1))
    body = await (await client.get("/")).read()
    assert body.count(ping) >= 2
    events = [b for b in body.split(b"\n\n") if b]
    assert all(e.startswith((b"event: ping", b"data: ")) for e in events)


async def test_keepalives_stop_when_the_handler_ends_early(aiohttp_client):
    stream: list[sse.EventStream] = []

    async def failing(request: web.Request) -> web.StreamResponse:
        response = await sse.open_stream(request)
        stream.append(response)
        raise ConnectionResetError  # the client went away mid-stream

    app = web.Application()
    app.router.add_get("/", failing)
    client = await aiohttp_client(app)
    try:
        await client.get("/")
    except Exception:  # noqa: BLE001 - the connection is cut by design
        pass
    await asyncio.sleep(0.05)
    assert stream and stream[0]._beat is None


async def test_a_keepalive_may_be_made_per_beat(aiohttp_client):
    """The Responses stream's keep-alive is a numbered event, made fresh each time."""
    beats = iter(range(100))
    client = await aiohttp_client(_app(lambda: sse.frame({"type": "beat", "n": next(beats)}), wait=0.5, interval=0.1))
    body = (await (await client.get("/")).read()).decode()
    numbers = [int(part.split("}")[0]) for part in body.split('"n":')[1:]]
    assert len(numbers) >= 2 and numbers == sorted(set(numbers))
