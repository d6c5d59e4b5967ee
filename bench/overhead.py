"""Decode tokens/s: llama-cpp-python in-process vs Hearth's streaming API end to end.

Same model (SmolLM2-135M Q4_1), same prompt, greedy, 256 tokens, same thread count, measured
in one run, alternating, median of the repeats. Decode rate = (tokens - 1) / (time of last
token - time of first token), so prompt processing is left out on both sides.
Target: hearth / llama_cpp >= 0.95. Then the device prefix cache is filled to its bound
(--cache-fraction of the KV pool, with unrelated prompts) and the measurement is repeated:
held cache slows every decode in a unified KV pool; target: at most 5% slower.

    python bench/overhead.py [--repeats 5] [--tokens 256]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from common import emit, model_path, stream_completion

PROMPT = "Once upon a time, in a small village by the sea, there lived"


def llama_cpp_rate(llm, tokens: int) -> tuple[float, str]:
    times, text = [], []
    for chunk in llm.create_completion(PROMPT, max_tokens=tokens, temperature=0, stream=True):
        times.append(time.perf_counter())
        text.append(chunk["choices"][0]["text"])
    return (len(times) - 1) / (times[-1] - times[0]), "".join(text)


async def fill_cache(url: str) -> dict:
    """Unrelated ~500-token prompts until the idle device cache stops growing."""
    import aiohttp

    async with aiohttp.ClientSession() as s:
        last = -1
        for i in range(40):
            prompt = f"Document {i}: " + " ".join(f"item{i}-{k}" for k in range(220))
            await stream_completion(s, url, {"prompt": prompt, "max_tokens": 2, "temperature": 0})
            async with s.get(f"{url}/hearth/stats") as r:
                kv = (await r.json())["models"][0]["kv"]
            if kv["blocks_cached"] == last:
                break
            last = kv["blocks_cached"]
    return kv


async def hearth_rate(url: str, tokens: int) -> tuple[float, str, int]:
    import aiohttp

    async with aiohttp.ClientSession() as s:
        r = await stream_completion(s, url, {"prompt": PROMPT, "max_tokens": tokens, "temperature": 0})
    return (r["tokens"] - 1) / (r["last"] - r["first"]), r["text"], r["tokens"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()

    import llama_cpp

    from runtime.backends.amx import keep_extra_buffers_off
    from runtime.backends.llama import ContextConfig, default_threads
    from runtime.server.launcher import ServiceProcess

    threads = args.threads or default_threads()
    defaults = ContextConfig()
    # Hearth turns llama.cpp's extra buffer types off where AMX is advertised (it traps there);
    # the baseline gets the same weights layout so only the serving path differs.
    keep_extra_buffers_off()
    path = model_path("smollm2-135m")
    # Same settings as Hearth's defaults: flash attention as llama.cpp's "auto" picks it (on).
    llm = llama_cpp.Llama(str(path), n_ctx=defaults.n_ctx, n_batch=defaults.n_batch, n_threads=threads,
                          n_threads_batch=threads, flash_attn=True, verbose=False)
    server = ServiceProcess("--model", "smollm2-135m", "--threads", str(threads)).wait_ready()
    try:
        asyncio.run(hearth_rate(server.url, 16))  # warm-up both
        llama_cpp_rate(llm, 16)
        base, ours, same_text, n_tokens = [], [], True, 0
        for _ in range(args.repeats):
            rate, text_a = llama_cpp_rate(llm, args.tokens)
            base.append(rate)
            rate, text_b, n_tokens = asyncio.run(hearth_rate(server.url, args.tokens))
            ours.append(rate)
            same_text &= text_a == text_b
        kv = asyncio.run(fill_cache(server.url))
        base_full, ours_full = [], []
        for _ in range(args.repeats):
            base_full.append(llama_cpp_rate(llm, args.tokens)[0])
            ours_full.append(asyncio.run(hearth_rate(server.url, args.tokens))[0])
    finally:
        server.stop()
    a, b = statistics.median(base), statistics.median(ours)
    a_full, b_full = statistics.median(base_full), statistics.median(ours_full)
    emit({
        "benchmark": "overhead", "model": "smollm2-135m", "threads": threads, "tokens": n_tokens,
        "repeats": args.repeats,
        "llama_cpp_in_process_tok_s": round(a, 1), "hearth_streaming_api_tok_s": round(b, 1),
        "ratio": round(b / a, 3), "target_ratio": 0.95, "same_greedy_text": same_text,
        "runs": {"llama_cpp": [round(x, 1) for x in base], "hearth": [round(x, 1) for x in ours]},
        "full_cache": {
            "cached_blocks": kv["blocks_cached"], "cached_tokens": kv["blocks_cached"] * kv["block_size"],
            "llama_cpp_in_process_tok_s": round(a_full, 1), "hearth_streaming_api_tok_s": round(b_full, 1),
            "ratio": round(b_full / a_full, 3),
            "slowdown_vs_empty_cache": round(1 - (b_full / a_full) / (b / a), 3), "target_slowdown": 0.05,
        },
    })


if __name__ == "__main__":
    main()
