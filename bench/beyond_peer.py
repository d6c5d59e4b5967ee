"""Where the design should win over llama-server, side by side in one run, the same tokens to both.

Three scenarios on the shape of Claude Code's requests (``agent_session.py``: its tools and
system prompt, each turn re-sending the whole conversation), sent as raw prompts (Hearth's
/v1/completions, llama-server's /completion with ``cache_prompt``), both servers with default
cache settings, two slots each, the same model and context:

1. **Four sessions interleaved** on one repository: the same system prompt and tools, four
   conversations, sent round-robin turn by turn (one client at a time). Hearth keeps one copy of
   the shared prefix for every session (paged blocks shared across sequences, host tier);
   llama-server has a slot per conversation and its RAM prompt cache of whole slot states.
   Reported: TTFT of every request but the very first (cold on both), mean and sum.
2. **A restart mid-session**: both servers stopped and started again, then the first session's
   next turn. Hearth's disk tier brings its prefix back; llama-server starts with nothing.
3. **An edit-heavy turn**: the model asked to repeat a file with one change (most of the answer
   is already in the prompt). Hearth with prompt lookup (``"draft": "ngram"`` on a service
   started with ``--draft ngram``) against llama-server's defaults (no speculation) and, as a
   second peer column, llama-server with ``--spec-type ngram-simple``. Reported: the answer's
   decode rate (tokens after the first over the time after the first).

Target: Hearth at least 2x faster than llama-server on each (TTFT ratio <= 0.5; decode >= 2x).
Random or small models: the edit's acceptance depends on the model copying the file, so say
which model ran.

    python bench/beyond_peer.py --peer /path/to/llama-server [--model gemma-3-270m] [--ctx 32768]
                                [--turns 3] [--tools 25]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import httpx
from agent_session import _ready, as_text, ask_text, session
from common import emit, model_path

HEARTH_PORT, PEER_PORT = 4393, 4394
FILE = "\n".join(f"def step_{i}(state):\n    \"\"\"Advance the state by one step ({i}).\"\"\"\n"
                 f"    state.count += {i}\n    return state\n" for i in range(24))
EDIT_ASK = ("Here is utils.py:\n\n```python\n" + FILE + "```\n\nRepeat the whole file exactly, with one change: "
            "rename the parameter `state` to `s` in step_7 only. Output only the file.")


def sessions(n: int, turns: int, tools: int | None) -> list[list[str]]:
    """``n`` conversations of one agent on one repository: the same system prompt and tools,
    their own first message; each as the raw prompt of every turn."""
    bodies = session(turns, 16)
    out = []
    for k in range(n):
        conv = []
        for body in bodies:
            b = copy.deepcopy(body)
            if tools is not None:
                b["tools"] = b.get("tools", [])[:tools]
            first = b["messages"][0]["content"]
            first[-1] = {"type": "text", "text": f"Session {k + 1}: {first[-1].get('text', '')[:200]}"}
            conv.append(as_text(b))
        out.append(conv)
    return out


def start_hearth(model: str, ctx: int, draft: bool = False) -> subprocess.Popen:
    """Hearth on the benchmark's data directory (``common``): its disk tier outlives a restart."""
    from runtime.self_command import hearth_argv

    env = {**os.environ, "HEARTH_KEEP_ALIVE": "-1"}
    cmd = [*hearth_argv(), "serve", "--port", str(HEARTH_PORT), "--model", model, "--ctx", str(ctx),
           "--parallel", "2", *(["--draft", "ngram"] if draft else [])]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_peer(binary: str, path: Path, ctx: int, *extra: str) -> subprocess.Popen:
    # two slots of the whole context each (Hearth's --ctx is across its two slots: it shares one pool)
    return subprocess.Popen([binary, "-m", str(path), "--port", str(PEER_PORT), "-c", str(ctx * 2), "-np", "2",
                             *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def decode_rate(url: str, prompt: list[int], native: bool, max_tokens: int, draft: bool) -> dict:
    """Tokens after the first over the time after the first, of one streamed answer (a chunk of
    Hearth's may carry several tokens under speculation: its count comes from ``usage``)."""
    path, body = (("/completion", {"prompt": prompt, "n_predict": max_tokens, "cache_prompt": True})
                  if native else ("/v1/completions", {"prompt": prompt, "max_tokens": max_tokens,
                                                       **({"draft": "ngram"} if draft else {}),
                                                       "stream_options": {"include_usage": True}}))
    times: list[float] = []
    text: list[str] = []
    n = 0
    with httpx.stream("POST", f"{url}{path}", json={**body, "stream": True, "temperature": 0}, timeout=3600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            doc = json.loads(line[6:])
            piece = doc.get("content") if native else "".join(c.get("text", "") for c in doc.get("choices") or [])
            if piece:
                times.append(time.perf_counter())
                text.append(piece)
            if native and doc.get("timings"):
                n = doc["timings"]["predicted_n"]
            if not native and doc.get("usage"):
                n = doc["usage"]["completion_tokens"]
    first_chunk_tokens = 1  # llama-server's first chunk is one token; Hearth's first is the prompt's sample
    rate = (n - first_chunk_tokens) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else 0.0
    return {"tokens": n, "chunks": len(times), "tokens_per_s": round(rate, 2), "text_start": "".join(text)[:100]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", required=True, help="a llama-server binary built from the same llama.cpp")
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--sessions", type=int, default=4)
    ap.add_argument("--tools", type=int, help="keep the first N of the agent's tools (default all: ~20k tokens)")
    ap.add_argument("--edit-tokens", type=int, default=256)
    ap.add_argument("--only-edit", action="store_true", help="run the edit scenario alone")
    args = ap.parse_args()
    path = model_path(args.model)
    convs = sessions(args.sessions, args.turns + 1, args.tools)
    hurl, purl = f"http://127.0.0.1:{HEARTH_PORT}", f"http://127.0.0.1:{PEER_PORT}"
    result: dict = {"benchmark": "beyond_peer", "model": args.model, "ctx": args.ctx, "sessions": args.sessions,
                    "turns": args.turns, "tools": args.tools, "interleaved": [], "targets": {"ttft_ratio": 0.5,
                                                                                         "decode_ratio": 2.0}}
    h, p = start_hearth(args.model, args.ctx), start_peer(args.peer, path, args.ctx)
    try:
        _ready(hurl, h)
        _ready(purl, p)
        if not args.only_edit:
            for t in range(args.turns):  # 1. four sessions, round-robin
                for s, conv in enumerate(convs):
                    row = {"session": s + 1, "turn": t + 1, "hearth": ask_text(hurl, conv[t], 1, False),
                           "llama_server": ask_text(purl, conv[t], 1, True)}
                    row["ratio"] = round(row["hearth"]["ttft_s"] / max(row["llama_server"]["ttft_s"], 1e-6), 3)
                    result["interleaved"].append(row)
            rest = result["interleaved"][1:]
            hs, ps = sum(r["hearth"]["ttft_s"] for r in rest), sum(r["llama_server"]["ttft_s"] for r in rest)
            result["interleaved_summary"] = {
                "requests": len(rest), "hearth_sum_s": round(hs, 2), "llama_server_sum_s": round(ps, 2),
                "ratio_of_sums": round(hs / max(ps, 1e-6), 3),
                "median_ratio": round(statistics.median(r["ratio"] for r in rest), 3)}
            stop(h)  # 2. a restart of both, then the first session's next turn
            stop(p)
            h, p = start_hearth(args.model, args.ctx), start_peer(args.peer, path, args.ctx)
            _ready(hurl, h)
            _ready(purl, p)
            nxt = convs[0][args.turns]
            row = {"hearth": ask_text(hurl, nxt, 1, False), "llama_server": ask_text(purl, nxt, 1, True)}
            row["ratio"] = round(row["hearth"]["ttft_s"] / max(row["llama_server"]["ttft_s"], 1e-6), 3)
            result["after_restart"] = row
        else:
            result.pop("interleaved")
        stop(h)  # 3. the edit, with prompt lookup on Hearth's side
        stop(p)
        h = start_hearth(args.model, args.ctx, draft=True)
        p = start_peer(args.peer, path, args.ctx)
        _ready(hurl, h)
        _ready(purl, p)
        text = f"<start_of_turn>user\n{EDIT_ASK}<end_of_turn>\n<start_of_turn>model\n"
        ids = httpx.post(f"{purl}/tokenize", json={"content": text, "add_special": True, "parse_special": True}).json()["tokens"]
        prompt = ids  # the same token ids to both (BOS included once)
        edit = {"hearth_ngram": decode_rate(hurl, prompt, False, args.edit_tokens, True),
                "llama_server": decode_rate(purl, prompt, True, args.edit_tokens, False)}
        stop(p)
        p = start_peer(args.peer, path, args.ctx, "--spec-type", "ngram-simple")
        _ready(purl, p)
        edit["llama_server_ngram_simple"] = decode_rate(purl, prompt, True, args.edit_tokens, False)
        for k in ("llama_server", "llama_server_ngram_simple"):
            edit[f"speedup_over_{k}"] = round(edit["hearth_ngram"]["tokens_per_s"]
                                              / max(edit[k]["tokens_per_s"], 1e-6), 3)
        result["edit"] = edit
    finally:
        stop(h)
        stop(p)
    emit(result)


if __name__ == "__main__":
    main()
