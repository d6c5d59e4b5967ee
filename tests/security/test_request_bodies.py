"""Request bodies that hold the service's memory, against a live ``hearth serve`` (real sockets on
127.0.0.1), with small limits so that each attack takes seconds:

- **drip**: a body near the limit at once, then a byte now and then (never still long enough for
  a stall timer) must get 408 a bounded time after it fell behind, and give its memory back;
- **budget**: many large uploads at once get 429 (one client past its share) or 503 (the
  service's budget spent) before they are read, so the bytes held stay within the budget
  whatever the number of connections;
- **compression bomb**: a small gzip or deflate body that inflates far past the body limit gets
  413 once the inflated bytes pass the limit, without the service ever holding more.

Throughout each attack ``/health`` answers within 250 ms (probed from another process) and a
chat request from another client is answered; the service's RSS is sampled every 20 ms and its
peak growth must stay near the budget, not the body size times the connections.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import httpx
import psutil
import pytest

from runtime.server.launcher import ServiceProcess

MiB = 2**20
MAX_BODY_MB = 8
BODY_S = 1.0  #: --body-timeout: the grace before the minimum rate applies, and the lag allowed behind it
BUDGET_MB, CLIENT_MB = 24, 12  #: the service's budget of body bytes, one client address's share
HEALTH_MS = 250.0
#: a cut comes within the lag allowed (BODY_S) plus two sweeps of the guard (one a second) and some
#: room for a loaded machine
CUT_WITHIN_S = BODY_S + 3.0
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}


@pytest.fixture(scope="module")
def server(smollm2_path):
    env = {**os.environ, "HEARTH_BODY_BUDGET_MB": str(BUDGET_MB), "HEARTH_CLIENT_BODY_BUDGET_MB": str(CLIENT_MB)}
    s = ServiceProcess("--parallel", "1", "--ctx", "1024", "--max-body-mb", str(MAX_BODY_MB),
                       "--body-timeout", str(BODY_S), "--max-client-requests", "64", env=env).wait_ready()
    yield s
    s.stop()


@pytest.fixture()
def attackers(accounts):
    """Four attacking clients: on loopback a client is a machine account (the probe and the chat
    come from the tests' own)."""
    return [accounts(i) for i in range(4)]


# -- the attacks' tools ---------------------------------------------------------------------------
class Watch:
    """While an attack runs: another process probes /health every 50 ms, this one asks for a chat
    from another address a third of the way in, and a thread samples the service's RSS."""

    def __init__(self, server, seconds: float) -> None:
        self.server, self.seconds = server, seconds
        self.proc = psutil.Process(server.proc.pid)
        self.samples: list[int] = []
        self.chat: dict = {}
        self._stop = threading.Event()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self.proc.memory_info().rss)
            time.sleep(0.02)

    def _ask(self) -> None:
        time.sleep(self.seconds / 3)
        t0 = time.perf_counter()
        r = httpx.post(f"{self.server.url}/v1/chat/completions", json=CHAT, timeout=60)
        self.chat.update(status=r.status_code, s=round(time.perf_counter() - t0, 2), text=r.text[:300])

    def run(self, attack) -> dict:
        self.before = self.proc.memory_info().rss
        probe = subprocess.Popen([sys.executable, str(Path(__file__).parent.parent / "server" / "health_probe.py"),
                                  str(self.server.port), str(self.seconds), "0.05"], stdout=subprocess.PIPE, text=True)
        sampler, asker = threading.Thread(target=self._sample), threading.Thread(target=self._ask)
        sampler.start()
        asker.start()
        try:
            result = asyncio.run(attack())
        finally:
            asker.join(90)
            health = json.loads(probe.communicate(timeout=120)[0])
            self._stop.set()
            sampler.join()
        lat = sorted(health["latencies_ms"])
        report = {"health_probes": len(lat), "health_errors": health["errors"], "health_max_ms": lat[-1] if lat else None,
                  "chat": self.chat, "rss_before_mib": round(self.before / MiB, 1),
                  "rss_peak_growth_mib": round((max(self.samples) - self.before) / MiB, 1), **result}
        print(json.dumps(report))
        return report

    def check(self, report: dict) -> None:
        assert self.server.proc.poll() is None, report
        assert report["health_errors"] == 0 and report["health_probes"] >= self.seconds * 5, report
        assert report["health_max_ms"] < HEALTH_MS, report
        assert report["chat"].get("status") == 200 and report["chat"]["s"] < 30, report


async def _answer(r: asyncio.StreamReader) -> tuple[int | None, dict | None]:
    """The service's answer on a connection: (status, JSON body), or (None, None) when it closed
    the connection without one."""
    try:
        head = await r.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError, OSError):
        return None, None
    status = int(head.split(b" ", 2)[1])
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    try:
        body = json.loads(await r.readexactly(length)) if length else None
    except (asyncio.IncompleteReadError, ConnectionError, OSError, ValueError):
        body = None
    return status, body


async def upload(port: int, account, declared: int, first: bytes, *, drip_every: float = 0.5,
                 seconds: float = 8.0, headers: bytes = b"", pace: float = 0.0) -> dict:
    """Send a head declaring ``declared`` bytes and ``first`` of them (in 256 KiB writes, ``pace``
    seconds apart), then one byte every ``drip_every`` seconds, until the service answers or closes
    the connection or ``seconds`` pass. Returns the answer and when it came, in seconds after the
    last write of ``first``."""
    r, w = await asyncio.open_connection(sock=account.sockets(port)[0])
    answer = asyncio.ensure_future(_answer(r))
    t0 = time.monotonic()
    burst_end = None
    during_first = True
    try:
        w.write(HEAD + headers + b"Content-Length: %d\r\n\r\n" % declared)
        for i in range(0, len(first), 256 * 1024):
            if answer.done():
                break
            w.write(first[i:i + 256 * 1024])
            await w.drain()
            if pace:
                await asyncio.sleep(pace)
        burst_end = time.monotonic()
        during_first = answer.done()
        sent = len(first)
        while not answer.done() and time.monotonic() - t0 < seconds and sent < declared:
            await asyncio.wait([answer], timeout=drip_every)
            if not answer.done():
                w.write(b" ")
                await w.drain()
                sent += 1
    except (ConnectionError, OSError):
        pass
    await asyncio.wait([answer], timeout=2)
    ended = time.monotonic()
    status, body = answer.result() if answer.done() else ("held", None)
    if not answer.done():
        answer.cancel()
    w.close()
    code = body.get("error", {}).get("code") if isinstance(body, dict) and isinstance(body.get("error"), dict) else None
    return {"status": status, "code": code, "after_burst_s": round(ended - (burst_end or ended), 2),
            "total_s": round(ended - t0, 2), "answered_during_first": during_first}


def _post_from(account, server, body: bytes) -> tuple[int, str]:
    status, answer, _ = account.request(server.port, "POST", "/v1/chat/completions", body, timeout=30)
    return status, answer.decode(errors="replace")


# -- the attacks ----------------------------------------------------------------------------------
def test_a_dripped_body_gets_408_soon_after_it_falls_behind_and_frees_its_memory(server, attackers):
    """The finding's attack at one connection: all of a body but 64 KiB at once, then a byte every
    half second (never still for the 1 s stall timer). The body must arrive at the minimum rate
    once the grace has passed; falling 1 s behind it gets 408 body_too_slow."""
    size = 4 * MiB
    watch = Watch(server, 8)

    async def attack() -> dict:
        return await upload(server.port, attackers[0], size, b'{"messages": "' + b"a" * (size - 64 * 1024 - 14))

    report = watch.run(attack)
    watch.check(report)
    assert report["status"] == 408 and report["code"] == "body_too_slow", report
    assert report["after_burst_s"] < CUT_WITHIN_S, report
    # its memory came back: another body of the same size from the same client is read whole (a
    # 400: it is not a chat request), not refused for the client's share of the budget
    status, text = _post_from(attackers[0], server, b'{"x": "' + b"a" * (size - 9) + b'"}')
    assert status == 400 and "messages" in text, text


def test_dripped_bodies_on_many_connections_hold_at_most_the_budget(server, attackers):
    """24 connections from three clients each send 8 MiB less 64 KiB at once and then drip: before
    any limit that held 192 MiB for as long as the drip went on (the stall timer reset by each byte).
    Now each client gets one body in (its share is 12 MiB), the rest get 429 before they are read,
    and the ones let in get 408 once they fall behind: the service's RSS grows by about the budget
    (24 MiB), not by the bodies' sum."""
    size = MAX_BODY_MB * MiB
    first = b'{"messages": "' + b"a" * (size - 64 * 1024 - 14)
    watch = Watch(server, 8)

    async def attack() -> dict:
        runs = await asyncio.gather(*(upload(server.port, attackers[i % 3], size, first) for i in range(24)))
        statuses: dict[str, int] = {}
        for run in runs:
            statuses[str(run["status"])] = statuses.get(str(run["status"]), 0) + 1
        cut = [run["after_burst_s"] for run in runs if run["status"] == 408]
        return {"connections": len(runs), "statuses": statuses, "slowest_408_after_burst_s": max(cut, default=None),
                "slowest_answer_s": max(run["total_s"] for run in runs)}

    report = watch.run(attack)
    watch.check(report)
    assert set(report["statuses"]) <= {"408", "429", "503"}, report
    assert report["statuses"].get("408", 0) >= 1 and report["slowest_408_after_burst_s"] < CUT_WITHIN_S, report
    # the budget, the read windows of 24 connections (up to 768 KiB each), a bytearray's growth room
    # and the allocator's: measured 38 to 45 MiB (without the limits: 357 to 367 MiB)
    assert report["rss_peak_growth_mib"] < BUDGET_MB + 48, report


def test_the_budget_refuses_uploads_past_it_before_reading_them(server, attackers):
    """Uploads of 7 MiB kept arriving at a good rate: a client's second one passes its 12 MiB share
    (429 client_body_budget), and three clients' first ones fill the service's 24 MiB so that a
    fourth client's gets 503 body_budget; small requests of another client are still served. Once
    the uploads end their budget is free again."""
    size = 7 * MiB
    first = b'{"messages": "' + b"a" * (512 * 1024)
    steady = b'{"messages": "' + b"a" * (6 * MiB)
    watch = Watch(server, 6)

    async def attack() -> dict:
        # each held upload sends 256 KiB every 0.25 s (1 MiB/s, well above the minimum rate) for 6 s
        def held(account) -> asyncio.Future:
            return asyncio.ensure_future(upload(server.port, account, size, steady, seconds=6, pace=0.25))

        a = held(attackers[0])
        await asyncio.sleep(0.5)
        a2 = await upload(server.port, attackers[0], size, first, seconds=3)
        b, c = held(attackers[1]), held(attackers[2])
        await asyncio.sleep(0.5)
        d = await upload(server.port, attackers[3], size, first, seconds=3)
        # while the budget is spent, another client's small body is still read (it is within the
        # bytes every connection may hold before the budget counts)
        async with httpx.AsyncClient(timeout=60) as client:
            small = await client.post(f"{server.url}/v1/chat/completions", json={"messages": []})
        held_runs = await asyncio.gather(a, b, c)
        return {"second_of_one_client": a2, "fourth_client": d, "held": held_runs,
                "small_while_spent": [small.status_code, small.text[:200]]}

    report = watch.run(attack)
    watch.check(report)
    assert report["second_of_one_client"]["status"] == 429, report
    assert report["second_of_one_client"]["code"] == "client_body_budget", report
    assert report["fourth_client"]["status"] == 503 and report["fourth_client"]["code"] == "body_budget", report
    assert report["second_of_one_client"]["total_s"] < 2 and report["fourth_client"]["total_s"] < 2, report
    assert report["small_while_spent"][0] == 400 and "messages" in report["small_while_spent"][1], report
    # let in, and not cut while they kept arriving (a 408 may come once they stop)
    assert all(run["status"] in ("held", 408) and not run["answered_during_first"] for run in report["held"]), report
    status, text = _post_from(attackers[3], server, b'{"x": "' + b"a" * (size - 9) + b'"}')
    assert status == 400 and "messages" in text, text


def _bomb(encoding: str, inflated: int) -> bytes:
    """``inflated`` bytes of a JSON text's start, compressed: about a thousandth of the size."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
    piece = b" " * MiB
    out = [z.compress(b'{"messages": "')]
    out += [z.compress(piece) for _ in range(inflated // MiB)]
    out.append(z.flush())
    return b"".join(out)


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compression_bomb_is_refused_at_the_body_limit_without_inflating_it(server, encoding, attackers):
    """A 254 KiB body inflating to 256 MiB, three at once from three clients: each gets 413 once
    its inflated bytes pass the 8 MiB limit, and the service never holds much more than that
    (before: the whole inflated body, 272 MiB, for one)."""
    bomb = _bomb(encoding, 256 * MiB)
    assert len(bomb) < 300 * 1024
    watch = Watch(server, 6)

    async def attack() -> dict:
        headers = f"Content-Encoding: {encoding}\r\n".encode()
        runs = await asyncio.gather(*(upload(server.port, a, len(bomb), bomb, headers=headers, seconds=5)
                                      for a in attackers[:3]))
        return {"compressed_kib": len(bomb) // 1024, "inflated_mib": 256, "runs": runs}

    report = watch.run(attack)
    watch.check(report)
    assert all(run["status"] == 413 and run["code"] == "body_too_large" for run in report["runs"]), report
    assert all(run["total_s"] < 3 for run in report["runs"]), report
    assert report["rss_peak_growth_mib"] < 3 * MAX_BODY_MB + 24, report


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compressed_chat_request_is_still_answered(server, encoding):
    raw = json.dumps(CHAT).encode()
    body = gzip.compress(raw) if encoding == "gzip" else zlib.compress(raw)
    r = httpx.post(f"{server.url}/v1/chat/completions", content=body, timeout=60,
                   headers={"Content-Type": "application/json", "Content-Encoding": encoding})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["role"] == "assistant"


def test_a_body_that_does_not_inflate_is_a_400_not_a_500(server):
    r = httpx.post(f"{server.url}/v1/chat/completions", content=b"not gzip at all" * 100, timeout=30,
                   headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert r.status_code == 400, r.text
