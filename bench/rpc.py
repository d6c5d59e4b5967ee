"""What splitting a model over RPC workers costs: the embedded model (SmolLM2) served by one
Hearth alone, then split by the fit planner over two ``hearth rpc-worker`` processes on
loopback and this machine's CPU (greedy, the same prompt, one request at a time).

    .venv/bin/python bench/rpc.py [--rounds 5] [--tokens 128] [--threads 1]

Prints JSON per setup: median time to first token (a 40-token prompt, streamed), decode
tokens/s (between the first and the last token), the layers each device held, and for the
split the bytes that crossed the loopback per generated token (the kernel's TCP counters of
the workers' connections, ``ss -ti``, over the generations only: the weights' upload at load is
not counted; prompts are counted with the tokens they led to). Loopback has no network latency: on a real network each token also pays the round
trips the split needs (one per device boundary and per synchronisation), which is the figure
that decides whether RPC pays; run it with workers on other machines (``--rpc``) to see it.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import time

import common  # noqa: F401  (sets a temporary data directory first)

from common import emit, model_path, stream_completion

PROMPT = ("The history of the city of Lyon begins with the Roman colony of Lugdunum, founded in 43 BC "
          "on the hill of Fourviere, which became the capital of the Gauls")


def tcp_bytes(port: int) -> tuple[int, int]:
    """(received, sent) bytes of the established connections to a loopback worker's ``port``, from
    the kernel's TCP counters (``ss -ti``: ``bytes_received``, ``bytes_sent``; Linux)."""
    out = subprocess.run(["ss", "-tinH", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True, check=True).stdout
    received = sum(int(m) for m in re.findall(r"bytes_received:(\d+)", out))
    sent = sum(int(m) for m in re.findall(r"bytes_sent:(\d+)", out))
    return received, sent


async def measure(url: str, rounds: int, tokens: int, ports: list[int]) -> dict:
    import aiohttp

    body = {"prompt": PROMPT, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}
    ttft, tps, generated, texts = [], [], 0, set()
    async with aiohttp.ClientSession() as s:
        await stream_completion(s, url, {**body, "max_tokens": 8})  # warm-up
        before = [tcp_bytes(p) for p in ports]
        for i in range(rounds):
            # a different first word each round: the prefix cache must not answer the prompt
            t0 = time.perf_counter()
            r = await stream_completion(s, url, {**body, "prompt": f"({i}) {PROMPT}"})
            ttft.append(r["first"] - t0)
            tps.append((r["chunks"] - 1) / (r["last"] - r["first"]))
            generated += r["tokens"]
            texts.add(r["text"][:40])
        after = [tcp_bytes(p) for p in ports]
    out = {"ttft_ms": round(statistics.median(ttft) * 1000, 1), "tokens_per_s": round(statistics.median(tps), 1),
           "generated_tokens": generated}
    if ports:
        sent = sum(a[0] - b[0] for a, b in zip(after, before))  # what the workers received: sent to them
        received = sum(a[1] - b[1] for a, b in zip(after, before))
        out.update(bytes_sent_per_token=round(sent / generated), bytes_received_per_token=round(received / generated))
    return out


def layers(stats: dict) -> dict:
    planned = stats["models"][0]["memory"]["planned"]
    return {"ram_bytes": planned["ram_bytes"], "device_bytes": planned["gpu_bytes"]}


def main(rounds: int, tokens: int, threads: int) -> dict:
    from runtime.server.launcher import ServiceProcess
    from tests.rpc_workers import start_workers

    model_path("smollm2-135m")
    settings = ("--parallel", "1", "--ctx", "2048", "--threads", str(threads), "--no-prefix-cache")
    result: dict = {"model": "smollm2-135m", "rounds": rounds, "tokens": tokens, "threads": threads}
    local = ServiceProcess(*settings).wait_ready()
    try:
        result["local"] = {**asyncio.run(measure(local.url, rounds, tokens, [])), **layers(local.stats())}
    finally:
        local.stop()
    workers = start_workers(2, threads=threads)
    try:
        split = ServiceProcess(*settings, "--rpc", ",".join(w.endpoint for w in workers)).wait_ready()
        try:
            ports = [w.port for w in workers]
            result["split_two_loopback_workers"] = {**asyncio.run(measure(split.url, rounds, tokens, ports)),
                                                    **layers(split.stats())}
        finally:
            split.stop()
    finally:
        for w in workers:
            w.stop()
    a, b = result["local"], result["split_two_loopback_workers"]
    result["split_vs_local"] = {"tokens_per_s_ratio": round(b["tokens_per_s"] / a["tokens_per_s"], 3),
                                "ttft_ratio": round(b["ttft_ms"] / a["ttft_ms"], 3)}
    return result


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1, help="CPU threads of the service and of each worker")
    args = ap.parse_args()
    emit(main(args.rounds, args.tokens, args.threads))
