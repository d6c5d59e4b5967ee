"""Aggregate decode tokens/s with 1, 2, 4 and 8 concurrent streaming clients.

One ``hearth serve`` with --parallel 8; each client streams a greedy completion of a
different prompt with a fixed number of tokens (EOS ignored). Aggregate = all tokens /
(last token of any client - start); each client count is run --repeats times, interleaved,
and the median kept. Target: 4 clients >= 1.5x one client.

    python bench/concurrency.py [--tokens 128] [--clients 1,2,4,8] [--repeats 3]
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
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from runtime.server.launcher import ServiceProcess

    model_path("smollm2-135m")
    counts = [int(c) for c in args.clients.split(",")]
    server = ServiceProcess("--model", "smollm2-135m", "--parallel", str(max(counts))).wait_ready()
    try:
        asyncio.run(run_clients(server.url, 1, 8))  # warm-up
        runs = {n: [] for n in counts}
        for _ in range(args.repeats):
            for n in counts:
                runs[n].append(asyncio.run(run_clients(server.url, n, args.tokens)))
        rows = [sorted(runs[n], key=lambda r: r["aggregate_tok_s"])[len(runs[n]) // 2] for n in counts]
        for n, row in zip(counts, rows):
            row["all_aggregate_tok_s"] = [r["aggregate_tok_s"] for r in runs[n]]
    finally:
        server.stop()
    by = {r["clients"]: r["aggregate_tok_s"] for r in rows}

    def paired(n: int) -> float | None:
        """Median over repeats of (n clients / 1 client) measured in the same round: the
        machine's slow drifts cancel out of each ratio."""
        if n not in runs or 1 not in runs:
            return None
        ratios = sorted(a["aggregate_tok_s"] / b["aggregate_tok_s"] for a, b in zip(runs[n], runs[1]))
        return round(ratios[len(ratios) // 2], 2)

    emit({"benchmark": "concurrency", "model": "smollm2-135m", "tokens_per_client": args.tokens,
          "repeats": args.repeats,
          "results": rows,
          "speedup_4_vs_1": paired(4), "speedup_8_vs_1": paired(8),
          "speedup_4_vs_1_of_medians": round(by[4] / by[1], 2) if 4 in by and 1 in by else None,
          "target_speedup_4_vs_1": 1.5})


if __name__ == "__main__":
    main()
