"""Aggregate decode tokens/s with 1, 2, 4 and 8 concurrent streaming clients.

One ``hearth serve`` with --parallel 8; each client streams a greedy completion of a
different prompt with a fixed number of tokens (EOS ignored). Aggregate = all tokens /
(last token of any client - start). Target: 4 clients >= 1.5x one client.

    python bench/concurrency.py [--tokens 128] [--clients 1,2,4,8]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from common import emit, model_path, stream_completion


async def run_clients(url: str, n: int, tokens: int) -> dict:
    import aiohttp

    async with aiohttp.ClientSession() as s:
        start = time.perf_counter()
        results = await asyncio.gather(*[
            stream_completion(s, url, {"prompt": f"Story number {i}: Once upon a time", "max_tokens": tokens,
                                       "temperature": 0, "ignore_eos": True})
            for i in range(n)])
    end = max(r["last"] for r in results)
    total = sum(r["tokens"] for r in results)
    ttft = [r["first"] - start for r in results]
    return {"clients": n, "tokens": total, "seconds": round(end - start, 3),
            "aggregate_tok_s": round(total / (end - start), 1),
            "per_client_tok_s": round(total / n / (end - start), 1),
            "max_ttft_s": round(max(ttft), 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--clients", default="1,2,4,8")
    args = ap.parse_args()
    from runtime.server.launcher import ServiceProcess

    model_path("smollm2-135m")
    counts = [int(c) for c in args.clients.split(",")]
    server = ServiceProcess("--model", "smollm2-135m", "--parallel", str(max(counts))).wait_ready()
    try:
        asyncio.run(run_clients(server.url, 1, 8))  # warm-up
        rows = [asyncio.run(run_clients(server.url, n, args.tokens)) for n in counts]
    finally:
        server.stop()
    by = {r["clients"]: r["aggregate_tok_s"] for r in rows}
    emit({"benchmark": "concurrency", "model": "smollm2-135m", "tokens_per_client": args.tokens,
          "results": rows,
          "speedup_4_vs_1": round(by[4] / by[1], 2) if 4 in by and 1 in by else None,
          "speedup_8_vs_1": round(by[8] / by[1], 2) if 8 in by and 1 in by else None,
          "target_speedup_4_vs_1": 1.5})


if __name__ == "__main__":
    main()
