"""One client's share of the service, against a live ``hearth serve`` (real sockets on 127.0.0.1):

- **streams that never end**: hundreds of connections each holding ``GET /hearth/downloads/events``
  used to fill every connection, and every other client got 503 for as long as they stayed. Now
  one client holds at most ``--max-client-held`` requests of any route; the rest get 429 and their
  connections, holding nothing, give way to other clients. An event stream ends after its
  lifetime with a ``retry:`` hint, and a response its client stops reading closes its connection;
- **loopback identity**: a caller on loopback binds any 127/8 source address; 24 generations
  from 24 addresses were 24 clients. Now a client on loopback is the machine account that owns
  the socket: one account is held to its limit whatever addresses it uses, another account is
  another client (``tests.accounts`` makes sockets of other accounts);
- **privacy between clients**: with the prefix cache isolated per client (``--cache-isolation
  client``, the default off loopback) a client's ``cached_tokens`` no longer tells whether another
  client sent the same prompt; stored Responses are bounded per client.

While each attack runs ``/health`` answers within 250 ms (probed from another process) and another
client's one-token request is answered within 2 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import httpx
import pytest
from aiohttp import web

from runtime.config import SecurityConfig
from runtime.server.launcher import ServiceProcess
from runtime.server.wire.responses.responses_store import ResponseStore
from tests.security.test_request_bodies import Watch
from tests.server.test_connection_limits import _guarded, _limits

HELD = 24  #: --max-client-held here
EVENTS = b"GET /hearth/downloads/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
SECOND_CLIENT_S = 2.0


@pytest.fixture(scope="module")
def server(smollm2_path):
    env = {**os.environ, "HEARTH_SSE_HEARTBEAT_S": "0.5", "HEARTH_SSE_LIFETIME_S": "3"}
    s = ServiceProcess("--parallel", "2", "--ctx", "2048", "--max-connections", "200", "--max-client-held", str(HELD),
                       "--max-client-requests", "8", env=env).wait_ready()
    yield s
    s.stop()


async def _status(r: asyncio.StreamReader, within: float) -> int | None:
    try:
        head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), within)
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError, OSError):
        return None
    return int(head.split(b" ", 2)[1])


def test_endless_streams_of_one_client_lock_nobody_out(server, accounts):
    """The finding at the test service's scale: 250 connections (its cap is 200) of one client each
    ask for the download events and keep them open."""
    attacker = accounts(0)
    watch = Watch(server, 8)

    async def attack() -> dict:
        conns = []
        for _ in range(0, 250, 50):
            for sock in attacker.sockets(server.port, 50):
                r, w = await asyncio.open_connection(sock=sock)
                w.write(EVENTS)
                conns.append((r, w))
            await asyncio.sleep(0.05)
        statuses = await asyncio.gather(*(_status(r, 5) for r, _ in conns))
        counts: dict[str, int] = {}
        for s in statuses:
            counts[str(s)] = counts.get(str(s), 0) + 1
        await asyncio.sleep(3)  # the asker's chat comes a third of the way in: the streams still held
        # another client's one-token request, while the streams are held
        t0 = time.perf_counter()
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.post(f"{server.url}/v1/completions", json={"prompt": "Hi", "max_tokens": 1})
        second = {"status": r.status_code, "s": round(time.perf_counter() - t0, 2)}
        health = httpx.get(f"{server.url}/health", timeout=10).json()
        for _, w in conns:
            w.close()
        return {"connections": len(conns), "statuses": counts, "second_client": second,
                "clients": health.get("clients")}

    report = watch.run(attack)
    watch.check(report)
    assert report["statuses"].get("200") == HELD, report  # the client's share, and no more
    assert report["statuses"].get("429", 0) + report["statuses"].get("None", 0) == 250 - HELD, report
    assert report["second_client"]["status"] == 200 and report["second_client"]["s"] < SECOND_CLIENT_S, report
    assert report["chat"]["s"] < SECOND_CLIENT_S, report


def test_an_event_stream_ends_after_its_lifetime_with_a_retry_hint(server):
    t0 = time.monotonic()
    with httpx.stream("GET", f"{server.url}/hearth/downloads/events", timeout=30) as r:
        assert r.status_code == 200
        text = "".join(r.iter_text())
    took = time.monotonic() - t0
    assert 2.5 < took < 6, took
    assert text.rstrip().endswith("retry: 1000"), text[-200:]


async def test_a_response_its_client_stops_reading_closes_its_connection():
    """A handler writes a megabyte at a time to a client that reads nothing: once the socket's
    buffers are full the transport stops writing, and after ``write_timeout`` the guard closes the
    connection, which ends the handler (before: it waited on the client for ever)."""
    ended: asyncio.Future = asyncio.get_running_loop().create_future()

    async def flood(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)
        try:
            while True:
                await response.write(b"x" * 2**20)
        except (ConnectionError, RuntimeError) as e:
            ended.set_result(type(e).__name__)
            raise
        finally:
            if not ended.done():
                ended.set_result("cancelled")

    runner, port = await _guarded(_limits(write_timeout=1.0), extra_routes=[("GET", "/flood", flood)])
    try:
        import socket

        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        sock.setblocking(False)
        r, w = await asyncio.open_connection(sock=sock)
        w.write(b"GET /flood HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        t0 = time.monotonic()
        how = await asyncio.wait_for(ended, 10)
        assert time.monotonic() - t0 < 5, how
        assert runner.guard.closed["reader"] == 1
        w.close()
    finally:
        await runner.cleanup()


def test_source_addresses_on_loopback_are_one_client(server, accounts):
    """24 generations at once from 127.0.0.2 to 127.0.0.25 (one account): before, 24 clients, all
    let in; now one client with 8 places (``--max-client-requests 8``). Another account is served."""

    async def one(i: int) -> int:
        transport = httpx.AsyncHTTPTransport(local_address=f"127.0.0.{2 + i}")
        async with httpx.AsyncClient(transport=transport, timeout=120) as c:
            async with c.stream("POST", f"{server.url}/v1/completions",
                                json={"prompt": "Count:", "max_tokens": 48, "ignore_eos": True, "stream": True}) as r:
                await r.aread()
                return r.status_code

    async def run() -> list[int]:
        return await asyncio.gather(*(one(i) for i in range(24)))

    statuses = asyncio.run(run())
    assert statuses.count(429) >= 16 and statuses.count(200) <= 8, statuses
    status, body, took = accounts(1).request(server.port, "POST", "/v1/completions",
                                             json.dumps({"prompt": "Hi", "max_tokens": 1}).encode())
    assert status == 200, body


# -- privacy between clients ------------------------------------------------------------------------
SYSTEM = "You are the assistant of the Finance team of ACME. Internal code word: " + " ".join(
    f"w{i}" for i in range(120))


def _cached(account, port: int) -> int:
    body = json.dumps({"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"}],
                       "max_tokens": 1}).encode()
    if account is None:
        r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", content=body,
                       headers={"Content-Type": "application/json"}, timeout=60)
        status, data = r.status_code, r.content
    else:
        status, data, _ = account.request(port, "POST", "/v1/chat/completions", body)
    assert status == 200, data
    return json.loads(data)["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)


@pytest.mark.parametrize("isolation", ["client", "shared"])
def test_cached_tokens_tell_a_client_only_of_its_own_prompts_where_the_cache_is_isolated(smollm2_path, accounts,
                                                                                        isolation):
    s = ServiceProcess("--parallel", "1", "--ctx", "2048", "--cache-isolation", isolation).wait_ready()
    try:
        first = _cached(None, s.port)  # the victim's system prompt
        mine = _cached(None, s.port)  # its next request reads it from the cache
        guess = _cached(accounts(2), s.port)  # another client guesses the same prompt
    finally:
        s.stop()
    assert first < 32 and mine >= 128, (first, mine)
    if isolation == "client":
        assert guess < 32, guess  # nothing read: nothing learned
    else:
        assert guess >= 128, guess  # shared: the saving every client gets on loopback by default


def test_the_cache_is_isolated_by_default_only_off_loopback():
    assert SecurityConfig(host="0.0.0.0").isolates_cache
    assert SecurityConfig(host="192.168.1.5").isolates_cache
    assert not SecurityConfig(host="127.0.0.1").isolates_cache
    assert not SecurityConfig(host="::1").isolates_cache
    assert SecurityConfig(host="127.0.0.1", cache_isolation="client").isolates_cache
    assert not SecurityConfig(host="0.0.0.0", cache_isolation="shared").isolates_cache


def test_one_client_storing_many_responses_evicts_only_its_own(tmp_path):
    """Before, the store kept the newest 1000 of everyone's: storing 1000 evicted every other
    client's. Now a client keeps at most its share; the others' stay."""
    store = ResponseStore(tmp_path, max_count=40, client_count=10)
    theirs = [f"resp_{i:032x}" for i in range(3)]
    for rid in theirs:
        store.put(rid, {"id": rid}, [], client="local:uid=1000")
    for i in range(100):
        rid = f"resp_{1000 + i:032x}"
        store.put(rid, {"id": rid}, [], client="local:uid=1001")
    assert all(store.get(rid) is not None for rid in theirs)
    mine = [i for i in range(100) if store.get(f"resp_{1000 + i:032x}") is not None]
    assert len(mine) == 10 and mine == list(range(90, 100))
    assert store.delete(theirs[0]) and store.get(theirs[0]) is None
