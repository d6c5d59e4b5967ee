"""Part 3 of bench/prefix_cache.py: a sliding-window model's growing conversation.

Gemma 3 270M (window 512) behind ``hearth serve --model gemma-3-270m --ctx 8192``; the
conversation is text sent through /v1/completions, growing by ~80 tokens a turn with the
client's own short reply appended (not the model's output). Every turn goes to each service
in turn, with the same text, so the prompts are identical: Hearth with default settings
(checkpoints in the host tier), Hearth with --cache-fraction 0.5 (cache kept on the device),
Hearth without the prefix cache, and optionally llama-server (``--peer PATH``: its binary,
default settings; its context checkpoints are per slot).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.request

from common import model_path

WINDS = ["north", "east", "south", "west", "north-east", "south-west"]
OPENING = ("The keeper's log of the lighthouse on the rocky point. Each entry records the weather, "
           "the ships that passed and the state of the lamp, as the harbour master asked.\n")


def turn_text(conv: int, i: int) -> str:
    """One turn of conversation ``conv``: a question and the client's own reply (~80 tokens)."""
    return (f"\nVisitor {conv}: Tell me about day {i + 1} at the lighthouse: the weather, the ships "
            f"and the lamp.\nKeeper: On day {i + 1} the wind came from the {WINDS[(i + conv) % 6]}, "
            f"{3 + (i * 7 + conv) % 9} ships passed the point before noon, the lamp needed new oil "
            f"at dusk, and I wrote every sail and flag in the log before the tide turned at midnight.")


async def complete(session, url: str, prompt: str, max_tokens: int) -> tuple[float, dict]:
    """Stream one completion; the time to its first text and its usage (or llama-server's timings)."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    ttft, usage = None, {}
    async with session.post(f"{url}/v1/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.content:
            if not line.startswith(b"data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            if "timings" in chunk:  # llama-server: prompt tokens taken from its cache
                usage.setdefault("prompt_tokens_details", {})["cached_tokens"] = chunk["timings"].get("cache_n")
            if chunk.get("choices") and chunk["choices"][0].get("text") and ttft is None:
                ttft = time.perf_counter() - start
    return (ttft if ttft is not None else time.perf_counter() - start), usage


def _cached(usage: dict) -> int | None:
    return (usage.get("prompt_tokens_details") or {}).get("cached_tokens")


async def conversation(urls: dict[str, str], turns: int, rounds: int) -> list[dict]:
    """``rounds`` conversations (different text after the shared opening), one after another;
    each turn's TTFT is the fastest of the rounds (a busy machine only ever slows a request)."""
    import aiohttp

    rows = [{"turn": i + 1} for i in range(turns)]
    async with aiohttp.ClientSession() as s:
        for r in range(rounds):
            text = OPENING
            for i, row in enumerate(rows):
                text += turn_text(10 + r, i)
                for name, url in urls.items():
                    ttft, usage = await complete(s, url, text + f"\nVisitor {10 + r}:", 16)
                    row.setdefault("prompt_tokens", usage.get("prompt_tokens"))
                    row[f"{name}_cached"] = _cached(usage)
                    key = f"{name}_ttft_s"
                    row[key] = round(min(ttft, row.get(key, ttft)), 4)
    return rows


async def interleaved(url: str, conversations: int, turns: int) -> dict:
    """``conversations`` chats in round-robin: each turn's prefix was computed that many requests earlier."""
    import aiohttp

    texts = [OPENING] * conversations
    first, later, hits, prompt = [], [], 0, 0
    # a connection per request: llama-server may close an idle kept-alive one between turns
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
        for i in range(turns):
            for c in range(conversations):
                texts[c] += turn_text(c + 1, i)
                ttft, usage = await complete(s, url, texts[c] + f"\nVisitor {c + 1}:", 8)
                (first if i == 0 else later).append(ttft)
                if i:
                    hits += _cached(usage) or 0
                    prompt += usage.get("prompt_tokens") or 0
    return {"conversations": conversations, "turns": turns,
            "mean_ttft_turn1_s": round(sum(first) / len(first), 4),
            "mean_ttft_turns_2_on_s": round(sum(later) / len(later), 4),
            "hit_rate_turns_2_on": round(hits / max(prompt, 1), 3)}


class _Peer:
    """llama-server on a free port, default settings (its own context checkpoints)."""

    def __init__(self, binary: str, model: str, ctx: int) -> None:
        from runtime.server.launcher import free_port

        self.port = free_port("127.0.0.1")
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([binary, "-m", model, "-c", str(ctx), "--port", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_ready(self, timeout: float = 120.0) -> "_Peer":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError("llama-server was not ready")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)


def run_window(turns: int, conversations: int, rr_turns: int, peer: str | None, rounds: int = 2) -> dict:
    from runtime.server.launcher import ServiceProcess

    path = model_path("gemma-3-270m")
    base = ("--model", "gemma-3-270m", "--ctx", "8192")
    services = {"default": ServiceProcess(*base), "device": ServiceProcess(*base, "--cache-fraction", "0.5"),
                "uncached": ServiceProcess(*base, "--no-prefix-cache")}
    peer_proc = _Peer(peer, str(path), 8192) if peer else None
    try:
        for svc in services.values():
            svc.wait_ready()
        urls = {name: svc.url for name, svc in services.items()}
        if peer_proc is not None:
            urls["llama_server"] = peer_proc.wait_ready().url
        rows = asyncio.run(conversation(urls, turns, rounds))
        for name in ("device", "uncached"):
            services.pop(name).stop()
        rr = asyncio.run(interleaved(services["default"].url, conversations, rr_turns))
        kv = services["default"].stats()["models"][0]["kv"]
        if peer_proc is not None:  # the same conversations, interleaved the same way
            rr_peer = asyncio.run(interleaved(peer_proc.url, conversations, rr_turns))
            rr = {**rr, "llama_server": rr_peer,
                  "ratio_turns_2_on": round(rr["mean_ttft_turns_2_on_s"] / rr_peer["mean_ttft_turns_2_on_s"], 3)}
    finally:
        for svc in services.values():
            svc.stop()
        if peer_proc is not None:
            peer_proc.stop()
    last = rows[-1]
    past = [r for r in rows if r["prompt_tokens"] > 512]  # past the window

    def median_ratio(name: str) -> float | None:
        ratios = sorted(r[f"{name}_ttft_s"] / r["uncached_ttft_s"] for r in past)
        return round(ratios[len(ratios) // 2], 3) if ratios else None

    out = {"benchmark": "prefix_cache_window", "model": "gemma-3-270m", "ctx": 8192, "rounds": rounds,
           "turns": rows,
           "last_turn_ratio": round(last["default_ttft_s"] / last["uncached_ttft_s"], 3),
           "device_last_turn_ratio": round(last["device_ttft_s"] / last["uncached_ttft_s"], 3),
           "median_ratio_past_window": median_ratio("default"),
           "device_median_ratio_past_window": median_ratio("device"),
           "target_last_turn_ratio": 0.15, "interleaved": rr, "kv_stats": kv}
    if peer_proc is not None:
        out["peer_last_turn_ratio"] = round(last["default_ttft_s"] / last["llama_server_ttft_s"], 3)
    return out
