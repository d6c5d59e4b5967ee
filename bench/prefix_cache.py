"""Time to first token of a growing multi-turn chat, prefix cache on vs off.

Part 1: one 10-turn conversation growing to about 1,500 prompt tokens. Two services run
side by side (default settings, and --no-prefix-cache); every turn is sent to both, with
the same messages (the replies of the cached service are used for both), so the prompts
are identical. Target: on the last turn, cached TTFT <= 0.15 x uncached TTFT.

Part 2: 12 conversations interleaved round-robin, 4 running slots: every turn's prefix was
computed 11 requests earlier. Reports the mean TTFT of turns 2-5 and the prefix hits.

Part 3 (``--window``): the sliding-window model (Gemma 3 270M, window 512) as in
``hearth serve --model gemma-3-270m --ctx 8192``: a conversation sent as text through
/v1/completions that grows by ~80 tokens a turn, the client appending its own short reply
(not the model's output), to 10 turns (~820 tokens): default settings (checkpoints in the
host tier), --cache-fraction 0.5 (cache kept on the device) and --no-prefix-cache, side by
side; then the same conversations interleaved. ``--peer PATH`` adds llama-server (its binary
at PATH, default settings, same model and context) as a fourth column, and runs the interleaved
conversations on it too.

    python bench/prefix_cache.py [--turns 10] [--conversations 12]
    python bench/prefix_cache.py --window [--turns 10] [--rounds 2] [--peer /path/to/llama-server]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from common import emit, model_path

SYSTEM = "You are a patient tutor. Explain step by step, with one short example each time."
TOPICS = ["fractions", "photosynthesis", "the French revolution", "binary numbers", "volcanoes",
          "supply and demand", "the water cycle", "prime numbers", "gravity", "poetry meter",
          "plate tectonics", "vaccines"]


def user_turn(topic: str, i: int) -> str:
    return (f"Question {i + 1} about {topic}: please explain the next idea about {topic} that builds on "
            f"what you said before, in simple words, and mention one common mistake students make "
            f"when they first learn about {topic}, and how to avoid it.")


async def ask(session, url: str, messages: list[dict], max_tokens: int) -> tuple[float, str, dict]:
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    ttft, text, usage = None, [], {}
    async with session.post(f"{url}/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.content:
            if not line.startswith(b"data: {"):
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"the service answered: {chunk['error']['message']}")
            if chunk.get("usage"):
                usage = chunk["usage"]
            elif chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                if ttft is None:
                    ttft = time.perf_counter() - start
                text.append(chunk["choices"][0]["delta"]["content"])
    return (ttft if ttft is not None else time.perf_counter() - start), "".join(text), usage


async def one_conversation(on_url: str, off_url: str, turns: int) -> list[dict]:
    import aiohttp

    rows = []
    messages = [{"role": "system", "content": SYSTEM}]
    async with aiohttp.ClientSession() as s:
        for i in range(turns):
            messages.append({"role": "user", "content": user_turn("fractions", i)})
            ttft_on, reply, usage = await ask(s, on_url, messages, 80)
            ttft_off, _, _ = await ask(s, off_url, messages, 1)
            messages.append({"role": "assistant", "content": reply})
            rows.append({"turn": i + 1, "prompt_tokens": usage["prompt_tokens"],
                         "cached_tokens": usage["prompt_tokens_details"]["cached_tokens"],
                         "ttft_cached_s": round(ttft_on, 4), "ttft_uncached_s": round(ttft_off, 4)})
    return rows


async def round_robin(url: str, conversations: int, turns: int) -> dict:
    import aiohttp

    chats = [[{"role": "system", "content": SYSTEM}] for _ in range(conversations)]
    ttfts: dict[int, list[float]] = {t: [] for t in range(turns)}
    hits = prompt = 0
    async with aiohttp.ClientSession() as s:
        for t in range(turns):
            # 4 at a time, as 4 running slots would take them
            for start in range(0, conversations, 4):
                batch = range(start, min(start + 4, conversations))
                for c in batch:
                    chats[c].append({"role": "user", "content": user_turn(TOPICS[c % len(TOPICS)], t)})
                results = await asyncio.gather(*[ask(s, url, chats[c], 40) for c in batch])
                for c, (ttft, reply, usage) in zip(batch, results):
                    chats[c].append({"role": "assistant", "content": reply})
                    ttfts[t].append(ttft)
                    if t > 0:
                        hits += usage["prompt_tokens_details"]["cached_tokens"]
                        prompt += usage["prompt_tokens"]
    later = [x for t in range(1, turns) for x in ttfts[t]]
    return {"conversations": conversations, "turns": turns,
            "mean_ttft_turn1_s": round(sum(ttfts[0]) / len(ttfts[0]), 4),
            "mean_ttft_turns_2_on_s": round(sum(later) / len(later), 4),
            "hit_tokens_turns_2_on": hits, "prompt_tokens_turns_2_on": prompt,
            "hit_rate": round(hits / max(prompt, 1), 3)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--conversations", type=int, default=12)
    ap.add_argument("--rr-turns", type=int, default=5)
    ap.add_argument("--window", action="store_true", help="the sliding-window model (part 3)")
    ap.add_argument("--peer", help="path of a llama-server binary to compare with (part 3)")
    ap.add_argument("--rounds", type=int, default=2, help="conversations per service in part 3 (fastest TTFT kept)")
    args = ap.parse_args()
    if args.window:
        from prefix_window import run_window

        emit(run_window(args.turns, min(args.conversations, 6), args.rr_turns, args.peer, args.rounds))
        return
    from runtime.server.launcher import ServiceProcess

    model_path("smollm2-135m")
    on = ServiceProcess("--parallel", "4").wait_ready()
    off = ServiceProcess("--parallel", "4", "--no-prefix-cache").wait_ready()
    try:
        rows = asyncio.run(one_conversation(on.url, off.url, args.turns))
        off.stop()
        before = on.stats()["models"][0]["kv"]
        rr = asyncio.run(round_robin(on.url, args.conversations, args.rr_turns))
        kv = on.stats()["models"][0]["kv"]
        host = kv["host_hit_tokens"] - before["host_hit_tokens"]
        rr["host_hit_tokens"] = host
        rr["device_hit_tokens"] = kv["prefix_hit_tokens"] - before["prefix_hit_tokens"] - host
    finally:
        on.stop()
        off.stop()
    last = rows[-1]
    emit({"benchmark": "prefix_cache", "model": "smollm2-135m", "turns": rows,
          "last_turn_ratio": round(last["ttft_cached_s"] / last["ttft_uncached_s"], 3),
          "target_last_turn_ratio": 0.15, "round_robin": rr, "kv_stats": kv})


if __name__ == "__main__":
    main()
