"""How long a stream stalls while another request's very large prompt is tokenized.

One worker per mode (SmolLM2): a greedy stream runs, and a prompt of ``--chars`` characters
arrives mid-stream (it is then refused as longer than the context, after tokenizing). The
longest gap between the stream's outputs is compared with the tokenizer on the step loop
(``inline_tokenize_chars`` above the prompt's length, as before) and on the helper thread.
Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from common import model_path  # noqa: E402 - sets up the data directory and sys.path

from runtime.engine.client import EngineClient, RequestRefused
from runtime.engine.messages import WorkerSpec
from runtime.engine.sampling_params import SamplingParams


async def longest_gap(path: str, chars: int, inline_limit: int) -> dict:
    client = EngineClient(WorkerSpec("smollm2-135m", path, n_ctx=2048, parallel=2, inline_tokenize_chars=inline_limit))
    await client.start()
    try:
        params = SamplingParams(temperature=0, max_tokens=60, ignore_eos=True)
        [stream] = await client.submit(params, prompt="Count slowly: one, two,")
        text = ("The quick brown fox jumps over the lazy dog. " * (chars // 45 + 1))[:chars]
        times, big, refused_after = [], None, None
        t0 = time.perf_counter()
        async for out in stream:
            times.append(time.perf_counter())
            if len(times) == 20:
                big = asyncio.ensure_future(client.submit(SamplingParams(max_tokens=1), prompt=text))
        try:
            await big
        except RequestRefused:
            refused_after = round(time.perf_counter() - t0, 3)
        gaps = [b - a for a, b in zip(times[20:], times[21:])]
        return {"longest_gap_ms": round(max(gaps) * 1000, 1), "median_gap_ms": round(sorted(gaps)[len(gaps) // 2] * 1000, 1),
                "outputs": len(times), "big_prompt_refused": refused_after is not None}
    finally:
        await client.stop()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chars", type=int, default=4_000_000)
    args = ap.parse_args()
    path = str(model_path("smollm2-135m"))
    inline = await longest_gap(path, args.chars, args.chars + 1)
    thread = await longest_gap(path, args.chars, 16 * 1024)
    print(json.dumps({"prompt_chars": args.chars, "inline": inline, "helper_thread": thread,
                      "longest_gap_ratio": round(inline["longest_gap_ms"] / thread["longest_gap_ms"], 2)}))


if __name__ == "__main__":
    asyncio.run(main())
