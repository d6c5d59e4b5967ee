"""/hearth/downloads/events stays open while nothing happens: heartbeat comments, then the
next event still arrives on the same stream (a heartbeat must not end the subscription)."""

from __future__ import annotations

import asyncio
import json
import os

import aiohttp

from runtime.server.launcher import ServiceProcess
from tests.store.hubfiles import REPO, publish


async def test_the_event_stream_outlives_its_heartbeats(loopback_hub, tmp_path, smollm2_path):
    publish(loopback_hub, tmp_path)
    s = ServiceProcess("--parallel", "1", "--ctx", "1024",
                       env={**os.environ, "HEARTH_SSE_HEARTBEAT_S": "0.2"}).wait_ready()
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            async with session.get(f"{s.url}/hearth/downloads/events") as r:
                pings = 0
                while pings < 5:  # about a second of silence, five heartbeats
                    line = await asyncio.wait_for(r.content.readline(), 10)
                    assert line, "the stream ended during the silence"
                    pings += line.startswith(b": ping")
                pull = await session.post(f"{s.url}/hearth/models/pull", json={"model": f"{REPO}:Q4_K_M"})
                assert pull.status == 202, await pull.text()
                wanted = (await pull.json())["id"]
                while True:
                    line = await asyncio.wait_for(r.content.readline(), 30)
                    assert line, "the stream ended before the download's events"
                    if line.startswith(b"data: ") and json.loads(line[6:])["id"] == wanted:
                        break
    finally:
        s.stop()
