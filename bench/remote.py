"""What a remote engine adds: the same streamed completion asked of a Hearth directly and
through a second Hearth that has it as an upstream (both on loopback, SmolLM2, greedy).

    .venv/bin/python bench/remote.py [--rounds 8] [--tokens 64]

Prints JSON: median time to first token and per-token time (between the first and last
token) direct and through the front Hearth, their differences, and whether the texts matched;
and ``relay_us_per_frame``: the front Hearth's own cost of passing one frame on, measured
against an upstream that sends 2,000 frames as fast as it can (no model).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import common  # noqa: F401  (sets a temporary data directory first)

from common import emit, model_path, stream_completion


async def main(rounds: int, tokens: int) -> dict:
    import aiohttp
    from aiohttp import web

    from runtime.config import ServeConfig
    from runtime.remote.upstream import make_upstream
    from runtime.server.app import create_app
    from runtime.server.app_keys import MANAGER
    from runtime.server.launcher import ServiceProcess

    model_path("smollm2-135m")
    upstream = ServiceProcess("--parallel", "1", "--ctx", "2048").wait_ready()
    front = create_app(ServeConfig(data_dir=Path(tempfile.mkdtemp(prefix="hearth-front-")), preload=False))
    runner = web.AppRunner(front)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    front_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    remotes = front[MANAGER].remotes
    remotes.add(make_upstream("up", upstream.url))
    await remotes.refresh()
    body = {"prompt": "The history of the city of Lyon", "max_tokens": tokens, "temperature": 0}
    direct, via = [], []
    try:
        async with aiohttp.ClientSession() as s:
            for i in range(rounds + 1):  # the first round of each warms up
                for url, model, out in ((upstream.url, "smollm2-135m", direct),
                                        (front_url, "smollm2-135m@up", via)):
                    t0 = time.perf_counter()
                    r = await stream_completion(s, url, {**body, "model": model})
                    if i:
                        out.append({**r, "ttft": r["first"] - t0,
                                    "per_token": (r["last"] - r["first"]) / max(r["chunks"] - 1, 1)})
    finally:
        await runner.cleanup()
        upstream.stop()

    relay = await relay_cost()

    def med(rows, key):
        return statistics.median(r[key] for r in rows)

    return {"rounds": rounds, "tokens": tokens,
            "ttft_direct_ms": round(med(direct, "ttft") * 1000, 2), "ttft_remote_ms": round(med(via, "ttft") * 1000, 2),
            "per_token_direct_ms": round(med(direct, "per_token") * 1000, 3),
            "per_token_remote_ms": round(med(via, "per_token") * 1000, 3),
            "ttft_added_ms": round((med(via, "ttft") - med(direct, "ttft")) * 1000, 2),
            "per_token_added_ms": round((med(via, "per_token") - med(direct, "per_token")) * 1000, 3),
            "chunks_direct": direct[0]["chunks"], "chunks_remote": via[0]["chunks"],
            "same_text": all(a["text"] == b["text"] for a, b in zip(direct, via)), **relay}


async def relay_cost(frames: int = 2000) -> dict:
    """Microseconds per frame: through the front Hearth minus straight from the fast upstream."""
    import json

    import aiohttp
    from aiohttp import web

    from runtime.config import ServeConfig
    from runtime.remote.upstream import make_upstream
    from runtime.server.app import create_app
    from runtime.server.app_keys import MANAGER

    async def models(request):
        return web.json_response({"data": [{"id": "fast"}]})

    async def completions(request):
        r = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await r.prepare(request)
        piece = json.dumps({"choices": [{"index": 0, "text": "x", "finish_reason": None}]})
        for _ in range(frames):
            await r.write(f"data: {piece}\n\n".encode())
        done = json.dumps({"choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
        await r.write(f"data: {done}\n\ndata: [DONE]\n\n".encode())
        return r

    async def serve(app):
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"

    fake = web.Application()
    fake.router.add_get("/v1/models", models)
    fake.router.add_post("/v1/completions", completions)
    fake_runner, fake_url = await serve(fake)
    front = create_app(ServeConfig(data_dir=Path(tempfile.mkdtemp(prefix="hearth-front-")), preload=False))
    front_runner, front_url = await serve(front)
    front[MANAGER].remotes.add(make_upstream("fast", fake_url))
    await front[MANAGER].remotes.refresh()
    times = {"direct": [], "via": []}
    try:
        async with aiohttp.ClientSession() as s:
            for _ in range(5):
                for key, url in (("direct", fake_url), ("via", front_url)):
                    t0 = time.perf_counter()
                    r = await stream_completion(s, url, {"model": "fast", "prompt": "x", "max_tokens": frames})
                    assert r["chunks"] == frames, r["chunks"]
                    times[key].append(time.perf_counter() - t0)
    finally:
        await front_runner.cleanup()
        await fake_runner.cleanup()
    d, v = statistics.median(times["direct"]), statistics.median(times["via"])
    return {"relay_us_per_frame": round((v - d) / frames * 1e6, 1), "relay_frames": frames}


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--tokens", type=int, default=64)
    a = p.parse_args()
    emit(asyncio.run(main(a.rounds, a.tokens)))
