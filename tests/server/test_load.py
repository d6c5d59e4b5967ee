"""Load: 32 concurrent streaming clients (OpenAI SSE and Ollama NDJSON) with random
cancellations against one live server on loopback, bounded in time.

Checked: every stream that ran to its end is well-formed; /health, probed from a separate
process all along, answers under 100 ms; the engine ends with nothing running and no KV
cells held; and the service process's memory returns to its baseline.

Memory tolerance: the baseline is taken after a warm-up round of the same traffic, so the
one-time allocations (connection and request objects, parsed templates, the allocator's
arenas for 32 streams) are in it. What may remain above it afterwards is allocator slack
that CPython and glibc do not return to the system; 24 MiB bounds it with room, while a
leak of even 1 KiB per request would exceed it over the thousands of requests of the run.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import psutil
import pytest

from tests.server.conftest import live_server

CLIENTS = 32
WARMUP_S = float(os.environ.get("HEARTH_LOAD_WARMUP_S", "10"))
RUN_S = float(os.environ.get("HEARTH_LOAD_SECONDS", "45"))
HEALTH_MS = 100.0
MEMORY_SLACK = 24 * 2**20


@pytest.fixture(scope="module")
def server(smollm2_path):
    s = live_server("--parallel", "8", "--ctx", "4096", "--max-client-requests", "64")
    yield s
    s.stop()


class Tally:
    def __init__(self) -> None:
        self.completed = self.cancelled = 0
        self.malformed: list[str] = []


async def _openai(session, url: str, rng: random.Random, tally: Tally) -> None:
    n = rng.randint(2, 12)
    cancel_after = rng.randint(1, 4) if rng.random() < 0.25 else None
    body = {"messages": [{"role": "user", "content": f"Count to {rng.randint(3, 30)}."}], "max_tokens": n,
            "stream": True, "temperature": 0.7, "seed": rng.randint(0, 1000)}
    async with session.post(f"{url}/v1/chat/completions", json=body) as r:
        assert r.status == 200, await r.text()
        events = []
        async for raw in r.content:
            line = raw.decode().strip()
            if not line or line.startswith(":"):  # an SSE comment: the keep-alive of a wait
                continue
            events.append(line)
            if cancel_after is not None and len(events) >= cancel_after:
                tally.cancelled += 1
                return  # leaving the block closes the connection mid-stream
    problems = []
    if events[-1] != "data: [DONE]":
        problems.append("no [DONE]")
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices") and c["choices"][0]["finish_reason"]]
    if len(finishes) != 1 or any(c.get("object") != "chat.completion.chunk" for c in chunks):
        problems.append(f"finishes {finishes}")
    if problems:
        tally.malformed.append(f"openai: {problems}: {events[-3:]}")
    else:
        tally.completed += 1


async def _ollama(session, url: str, rng: random.Random, tally: Tally) -> None:
    n = rng.randint(2, 12)
    cancel_after = rng.randint(1, 4) if rng.random() < 0.25 else None
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": f"Name {rng.randint(2, 9)} fruits."}],
            "options": {"num_predict": n, "seed": rng.randint(0, 1000)}}
    async with session.post(f"{url}/api/chat", json=body) as r:
        assert r.status == 200, await r.text()
        lines = []
        async for raw in r.content:
            if raw.strip():
                lines.append(json.loads(raw))
                if cancel_after is not None and len(lines) >= cancel_after:
                    tally.cancelled += 1
                    return
    last = lines[-1]
    if not (last.get("done") is True and 1 <= last.get("eval_count", 0) <= n
            and all(x.get("done") is False for x in lines[:-1])):
        tally.malformed.append(f"ollama: {lines[-2:]}")
    else:
        tally.completed += 1


async def _traffic(url: str, seconds: float, seed: int) -> Tally:
    """Each client streams requests back to back; at the deadline the streams still open are
    cut (more cancellations), so the run is bounded however slow the machine is."""
    tally = Tally()

    async def client(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        async with aiohttp.ClientSession() as session:
            while True:
                await (_openai if rng.random() < 0.5 else _ollama)(session, url, rng, tally)

    tasks = [asyncio.create_task(client(i)) for i in range(CLIENTS)]
    done, _ = await asyncio.wait(tasks, timeout=seconds)
    for t in done:
        t.result()  # a client that failed (an assertion on a status) fails the test
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return tally


def _settle(server, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        m = server.stats()["models"][0]
        if (m["running"] == 0 and m["waiting"] == 0) or time.monotonic() > deadline:
            return m
        time.sleep(0.1)


@pytest.mark.timeout(600)
def test_32_streaming_clients_with_cancellations(server):
    service = psutil.Process(server.proc.pid)
    asyncio.run(_traffic(server.url, WARMUP_S, seed=1))
    _settle(server)
    gc.collect()
    time.sleep(1.0)
    baseline = service.memory_info().rss

    probe = subprocess.Popen([sys.executable, str(Path(__file__).with_name("health_probe.py")),
                              str(server.port), str(RUN_S), "0.05"], stdout=subprocess.PIPE, text=True)
    tally = asyncio.run(_traffic(server.url, RUN_S, seed=2))
    health = json.loads(probe.communicate(timeout=120)[0])

    m = _settle(server)
    time.sleep(1.0)
    after = service.memory_info().rss
    lat = sorted(health["latencies_ms"])
    report = {"completed": tally.completed, "cancelled": tally.cancelled, "malformed": len(tally.malformed),
              "health_probes": len(lat), "health_max_ms": lat[-1] if lat else None,
              "health_p99_ms": lat[int(len(lat) * 0.99)] if lat else None,
              "rss_baseline_mib": round(baseline / 2**20, 1), "rss_after_mib": round(after / 2**20, 1)}
    print(json.dumps(report))
    assert not tally.malformed, tally.malformed[:5]
    assert tally.completed >= 1 and tally.cancelled >= 1
    assert health["errors"] == 0 and len(lat) >= RUN_S * 5
    assert lat[-1] < HEALTH_MS, report
    assert m["running"] == 0 and m["waiting"] == 0 and m["kv"]["cells_used"] == 0
    assert after <= baseline + MEMORY_SLACK, report
