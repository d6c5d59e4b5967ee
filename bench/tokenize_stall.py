"""How long a stream stalls while another request's very large prompt is tokenized.

One worker per mode (SmolLM2, 2,048-token context): a greedy stream runs, and a prompt of
``--chars`` characters arrives mid-stream and is refused as longer than the context. Modes:
``inline`` tokenizes it on the step loop first (as before: ``inline_tokenize_chars`` above its
length); ``helper_thread`` is the default path: a prompt that cannot fit whatever its tokens is
refused without tokenizing, a shorter one is tokenized on the helper thread. Medians over
``--rounds`` alternating rounds of the stream's longest gap, its median gap, and how long the
big prompt took to be refused. Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from common import model_path  # noqa: E402 - sets up the data directory and sys.path

from runtime.config import EngineConfig
from runtime.engine.client import EngineClient, RequestRefused
from runtime.engine.messages import WorkerSpec
from runtime.sampling_params import SamplingParams


async def longest_gap(client: EngineClient, text: str) -> dict:
    """One round: the stream's longest gap after the big prompt arrives, and when it was refused."""
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    [stream] = await client.submit(params, prompt="Count slowly: one, two,")
    times, big, sent, answered = [], None, 0.0, []
    async for _ in stream:
        times.append(time.perf_counter())
        if len(times) == 10:
            sent = time.perf_counter()
            big = asyncio.ensure_future(client.submit(SamplingParams(max_tokens=1), prompt=text))
            big.add_done_callback(lambda _: answered.append(time.perf_counter() - sent))
    try:
        await big
    except RequestRefused:
        pass
    answered = answered[0] if answered else None
    gaps = [b - a for a, b in zip(times[10:], times[11:])]
    return {"longest_gap_ms": max(gaps) * 1000, "median_gap_ms": statistics.median(gaps) * 1000,
            "refused_after_ms": None if answered is None else answered * 1000}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chars", type=int, default=4_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    path = str(model_path("smollm2-135m"))
    text = ("The quick brown fox jumps over the lazy dog. " * (args.chars // 45 + 1))[:args.chars]
    modes = {"inline": args.chars + 1, "helper_thread": 16 * 1024}
    clients = {}
    for name, limit in modes.items():
        clients[name] = EngineClient(WorkerSpec("smollm2-135m", path, EngineConfig(ctx=2048, parallel=2),
                                                inline_tokenize_chars=limit))
        await clients[name].start()
    rounds: dict[str, list[dict]] = {name: [] for name in modes}
    try:
        for _ in range(args.rounds):  # alternating, so load changes hit both modes alike
            for name, client in clients.items():
                rounds[name].append(await longest_gap(client, text))
    finally:
        for client in clients.values():
            await client.stop()
    out = {"prompt_chars": args.chars, "rounds": args.rounds}
    for name, rs in rounds.items():
        out[name] = {k: round(statistics.median(r[k] for r in rs), 1) if all(r[k] is not None for r in rs) else None
                     for k in rs[0]}
    out["longest_gap_ratio"] = round(out["inline"]["longest_gap_ms"] / out["helper_thread"]["longest_gap_ms"], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main())
