"""Connections and bodies without limits: floods of idle and half-sent connections, slowloris
heads, stalled uploads and Origin-hopping clients against a live ``hearth serve`` (real sockets
on 127.0.0.1). Throughout each attack ``/health`` answers within 250 ms (probed from another
process), a chat request is served, the service's pid stays the same, and its memory comes back
near where it started. Then the guard's rules one by one, on an app in this process."""

from __future__ import annotations

import asyncio
import json
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest
from aiohttp import web

from runtime.server.app_keys import CONFIG
from runtime.server.connections import ConnectionLimits, GuardedRunner
from tests.server.conftest import live_server

HEADER_S, BODY_S = 2.0, 2.0
HEALTH_MS = 250.0
MEMORY_SLACK = 64 * 2**20
CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


@pytest.fixture(scope="module")
def server(smollm2_path):
    _fd_room(4096)
    s = live_server("--parallel", "2", "--ctx", "2048", "--header-timeout", str(HEADER_S),
                    "--body-timeout", str(BODY_S), "--max-connections", "200", "--max-client-requests", "2")
    yield s
    s.stop()


def _fd_room(n: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))


def _rss(server) -> int:
    return psutil.Process(server.proc.pid).memory_info().rss


class Attack:
    """Run ``attack`` (a coroutine function) while another process probes /health and this one
    asks for a chat; report the slowest /health and the service's RSS growth."""

    def __init__(self, server, name: str) -> None:
        self.server, self.name = server, name

    def run(self, attack, seconds: float) -> dict:
        server = self.server
        pid = server.stats()["models"][0]["pid"]  # the model's worker: it must not restart either
        before = _rss(server)
        probe = subprocess.Popen([sys.executable, str(Path(__file__).with_name("health_probe.py")),
                                  str(server.port), str(seconds), "0.05"], stdout=subprocess.PIPE, text=True)
        chat: dict = {}

        def ask() -> None:
            time.sleep(seconds / 3)  # with the attack in full swing
            t0 = time.perf_counter()
            r = httpx.post(f"{server.url}/v1/chat/completions", json=CHAT, timeout=60)
            chat.update(status=r.status_code, s=time.perf_counter() - t0)

        asker = threading.Thread(target=ask)
        asker.start()
        result = asyncio.run(attack())
        asker.join(90)
        health = json.loads(probe.communicate(timeout=120)[0])
        time.sleep(1.0)
        after = _rss(server)
        lat = sorted(health["latencies_ms"])
        report = {"attack": self.name, "health_probes": len(lat), "health_errors": health["errors"],
                  "health_max_ms": lat[-1] if lat else None, "chat_status": chat.get("status"),
                  "chat_s": round(chat.get("s", -1), 2), "rss_before_mib": round(before / 2**20, 1),
                  "rss_growth_mib": round((after - before) / 2**20, 1), **(result or {})}
        print(json.dumps(report))
        assert server.proc.poll() is None and server.stats()["models"][0]["pid"] == pid, report
        assert health["errors"] == 0 and len(lat) >= seconds * 5, report
        assert lat[-1] < HEALTH_MS, report
        assert chat.get("status") == 200 and chat["s"] < 30, report
        assert after <= before + MEMORY_SLACK, report
        return report


@pytest.fixture()
def attacker(accounts):
    """The attacks come from another machine account than the probe and the chat: on loopback
    one account is one client (``runtime.server.client_identity``), and the per-client limits
    rightly hold a client to its share."""
    return accounts(0)


async def _connect(account, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(sock=account.sockets(port)[0])


async def _open(port: int, n: int, first: bytes = b"",
                account=None) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """``n`` connections, of ``account`` (None: this process's)."""
    conns = []
    socks = account.sockets(port, n) if account is not None else None
    for i in range(n):
        if socks is not None:
            r, w = await asyncio.open_connection(sock=socks[i])
        else:
            r, w = await asyncio.open_connection("127.0.0.1", port)
        if first:
            w.write(first)
        conns.append((r, w))
        if i % 50 == 49:
            await asyncio.sleep(0.01)  # a flood, not a single burst the kernel's backlog drops
    return conns


async def _closed_by_server(conns, within: float) -> int:
    """How many of ``conns`` the service closed within ``within`` seconds."""

    async def eof(r: asyncio.StreamReader) -> bool:
        try:
            while await r.read(65536):
                pass
            return True
        except (ConnectionError, OSError):
            return True

    done = await asyncio.gather(*(asyncio.wait_for(eof(r), within) for r, _ in conns), return_exceptions=True)
    for _, w in conns:
        w.close()
    return sum(1 for d in done if d is True)


def test_a_thousand_idle_connections_lock_nobody_out(server, attacker):
    async def attack():
        conns = await _open(server.port, 1000, account=attacker)
        t0 = time.monotonic()
        closed = await _closed_by_server(conns, HEADER_S + 8)
        return {"connections": len(conns), "closed_by_service": closed, "all_closed_s": round(time.monotonic() - t0, 1)}

    report = Attack(server, "1000 idle connections").run(attack, 10)
    assert report["closed_by_service"] == 1000


def test_half_sent_heads_and_slowloris_are_dropped_after_the_head_timeout(server, attacker):
    async def slowloris(port: int) -> float:
        """Send a request head a byte a second; seconds until the service closes the connection."""
        r, w = await _connect(attacker, port)
        t0 = time.monotonic()
        closed = asyncio.ensure_future(r.read())  # b"" once the service closes it
        for byte in HEAD + b"X-Pad: " + b"a" * 200:
            if closed.done():
                break
            w.write(bytes([byte]))
            await asyncio.wait([closed], timeout=1.0)
        await asyncio.wait([closed], timeout=10)
        took = time.monotonic() - t0
        if closed.done():
            closed.exception()  # a reset is a close too
        else:
            closed.cancel()
        w.close()
        return took

    async def attack():
        half = await _open(server.port, 500, HEAD, account=attacker)  # a head that never ends
        lorises = await asyncio.gather(*(slowloris(server.port) for _ in range(20)))
        closed = await _closed_by_server(half, 2)
        return {"half_sent": len(half), "half_closed": closed, "slowloris": len(lorises),
                "slowloris_dropped_after_s": round(max(lorises), 1)}

    report = Attack(server, "500 half-sent heads + 20 slowloris").run(attack, 10)
    assert report["half_closed"] == 500
    assert report["slowloris_dropped_after_s"] <= HEADER_S + 2.5  # one sweep (1 s) and a byte's wait


def test_stalled_uploads_are_dropped_and_their_memory_freed(server, attacker):
    size = 4 * 2**20

    async def stalled(port: int) -> float:
        r, w = await _connect(attacker, port)
        w.write(HEAD + b"Content-Length: %d\r\n\r\n" % (size + 1) + b"{" + b" " * (size - 1))
        await w.drain()  # all but the last byte, then nothing
        t0 = time.monotonic()
        try:
            while await r.read(65536):
                pass
        except (ConnectionError, OSError):
            pass
        w.close()
        return time.monotonic() - t0

    async def attack():
        dropped = await asyncio.wait_for(asyncio.gather(*(stalled(server.port) for _ in range(12))), 30)
        return {"uploads": len(dropped), "upload_mib": size // 2**20, "dropped_after_s": round(max(dropped), 1)}

    report = Attack(server, "12 stalled 4 MiB uploads").run(attack, 8)
    assert report["dropped_after_s"] <= BODY_S + 2.5


def test_the_request_limit_counts_the_client_not_the_origin_or_the_address(server, attacker):
    """Every header is the caller's to choose, and on loopback so is the source address: the
    in-flight limit (2 here) holds for one machine account whatever ``Origin`` each request
    claims and whatever 127/8 address it comes from. Two requests whose bodies are still
    arriving hold the client's two places (a request counts from its head on); another account
    is another client."""

    async def run() -> list[tuple[str | None, int, str]]:
        held = []
        for i in range(2):
            r, w = await asyncio.open_connection("127.0.0.1", server.port)
            w.write(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    b"Origin: http://localhost:%d\r\nContent-Length: 100\r\n\r\n{" % (9000 + i))
            held.append(w)
        await asyncio.sleep(0.3)
        out = []
        for i, origin in enumerate(("http://localhost:9100", "http://127.0.0.1:9101", None, None)):
            source = f"127.0.0.{2 + i}"  # another address each time: still the same client
            async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(local_address=source), timeout=60) as c:
                r = await c.post(f"{server.url}/v1/completions", json={"prompt": "hi", "max_tokens": 2},
                                 headers={"Origin": origin} if origin else {})
            out.append((origin, r.status_code, r.text))
        for w in held:
            w.close()
        return out

    for origin, status, text in asyncio.run(run()):
        assert status == 429 and "too_many_requests" in text, (origin, text)
    status, body, _ = attacker.request(server.port, "POST", "/v1/completions",
                                       json.dumps({"prompt": "hi", "max_tokens": 2}).encode())
    assert status == 200, body


# -- the guard's rules, one by one, on a small app in this process -------------------------------
def _limits(**over) -> ConnectionLimits:
    base = dict(header_timeout=1.0, body_timeout=1.0, body_total_timeout=3.0, keepalive_timeout=15.0,
                max_connections=10, reserved_connections=2)
    return ConnectionLimits(**{**base, **over})


async def _guarded(limits: ConnectionLimits, extra_routes=(), **config_over):
    from runtime.config import SecurityConfig, ServeConfig
    from runtime.server.app import create_app

    app = create_app(ServeConfig(preload=False, security=SecurityConfig(**config_over)))
    for method, path, handler in extra_routes:
        app.router.add_route(method, path, handler)
    runner = GuardedRunner(app, limits, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]


async def _get(port: int, path: str, headers: bytes = b"") -> bytes:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s\r\n" % (path.encode(), headers))
    try:
        return await asyncio.wait_for(r.read(), 5)
    finally:
        w.close()


async def _response(r: asyncio.StreamReader) -> bytes:
    """One whole HTTP response (status line, headers, a Content-Length body) from ``r``."""
    head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 5)
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    return head + await asyncio.wait_for(r.readexactly(length), 5)


async def test_a_client_between_two_requests_keeps_its_connection_when_a_flood_comes():
    runner, port = await _guarded(_limits())
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (await _response(r)).startswith(b"HTTP/1.1 200")
        flood = await _open(port, 30)  # three times the cap: each new one evicts a silent one
        await asyncio.sleep(0.2)
        assert runner.guard.closed["evicted"] >= 20 and len(runner.guard.open) <= 10
        w.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # the kept-alive client goes on
        assert (await _response(r)).startswith(b"HTTP/1.1 200")
        w.close()
        for _, fw in flood:
            fw.close()
    finally:
        await runner.cleanup()


async def test_when_every_connection_holds_a_request_the_reserve_serves_health_and_the_app_only():
    from runtime.import_confirm import CONFIRM_HEADER, ensure_token

    runner, port = await _guarded(_limits(max_connections=4, reserved_connections=2, body_timeout=30.0,
                                          body_total_timeout=30.0))
    token = ensure_token(runner.app[CONFIG].data_dir)
    busy, extra = [], []
    try:
        busy = await _open(port, 4, HEAD + b"Content-Length: 100\r\n\r\n{")  # four uploads in progress
        await asyncio.sleep(0.3)
        assert all(c.holds_request for c in runner.guard.open)
        assert b"200 OK" in await _get(port, "/health")
        refused = await _get(port, "/v1/models")
        assert b"503" in refused.split(b"\r\n")[0] and b"too_many_connections" in refused
        app = await _get(port, "/v1/models", f"{CONFIRM_HEADER}: {token}\r\n".encode())
        assert b"200 OK" in app.split(b"\r\n")[0]
        # two of the app's uploads fill the reserve: the next connection is closed unread
        extra = await _open(port, 2, HEAD + f"{CONFIRM_HEADER}: {token}\r\n".encode() + b"Content-Length: 100\r\n\r\n{")
        await asyncio.sleep(0.3)
        closed = await _open(port, 1)
        assert await _closed_by_server(closed, 2) == 1 and runner.guard.closed["full"] == 1
    finally:
        for _, w in busy + extra:
            w.close()
        await runner.cleanup()


async def test_a_trickled_body_is_dropped_at_the_total_body_timeout():
    runner, port = await _guarded(_limits(body_timeout=1.0, body_total_timeout=2.5))
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(HEAD + b"Content-Length: 1000\r\n\r\n{")
        t0 = time.monotonic()
        try:
            for _ in range(20):  # a byte every 0.5 s: never stalled for 1 s, never done
                await asyncio.sleep(0.5)
                w.write(b" ")
                await w.drain()
                if r.at_eof() or w.is_closing():
                    break
            await asyncio.wait_for(r.read(), 3)
        except (ConnectionError, OSError):
            pass
        assert time.monotonic() - t0 < 5 and runner.guard.closed["body_slow"] == 1
        w.close()
    finally:
        await runner.cleanup()
