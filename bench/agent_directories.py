"""A coding agent's sessions in several directories, then a new session in the first one.

Each session sends the recorded shape of Claude Code's first request (``tests/server/agent_requests/
claude_code.json``: the billing header line, which the service strips, the system text, its tools
and the first user turn's reminders) with its directory in the system text and a request of its
own, then a second turn. The directories come one after another; between two of them a request to
another model unloads this one (``--max-models 1``), so each directory's sessions run in a new
worker, which finds the earlier ones' prefixes in the disk tier only. Last, a new session in the
first directory: it should read what the first directory's sessions share (their tools,
instructions and reminders) from cache, as its second and third sessions did. Default cache
settings, but a small ``--ctx`` (one conversation fills much of the pool, so the host and disk
tiers take over) and ``--cache-ram`` / ``--cache-disk`` when given.

    python bench/agent_directories.py [--model gemma-3-270m] [--other smollm2-135m] [--ctx 4096]
                                      [--tools 4] [--directories 3] [--sessions 3]
                                      [--cache-ram MIB] [--cache-disk MIB]

Prints JSON: each request (directory, session, turn, prompt and cached tokens, TTFT), the new
session's cached tokens against the most that the first directory's earlier sessions read from
one another (``shared``), and the model's cache statistics at the end.
"""

from __future__ import annotations

import argparse
import copy
import json
import os

import httpx
from agent_session import ask
from common import ROOT, emit, model_path

SHAPE = ROOT / "tests" / "server" / "agent_requests" / "claude_code.json"
ASKS = ["Explain what main does.", "Refactor the config loader.", "Why does the build fail?",
        "Add a test for the parser.", "Rename the cache module.", "Speed up the slow test."]


def body(model: str, tools: int, directory: int, session: int, turn: int) -> dict:
    """One request of a session: the recorded shape, this directory, this session's own turns."""
    base = json.loads(SHAPE.read_text())["body"]
    for k in ("metadata", "context_management", "output_config", "thinking"):
        base.pop(k, None)
    system = copy.deepcopy(base["system"])
    system[-1]["text"] = f"Working directory: /home/user/project{directory}\n" + system[-1]["text"]
    first = [b for b in base["messages"][0]["content"] if b.get("type") == "text"]
    first.append({"type": "text", "text": ASKS[session % len(ASKS)]})
    messages = [{"role": "user", "content": first}]
    for t in range(turn):
        messages += [{"role": "assistant", "content": [{"type": "text", "text": f"I read the files of step {t}."}]},
                     {"role": "user", "content": [{"type": "text", "text": f"Go on with step {t + 1}."}]}]
    return {"model": model, "system": system, "tools": base["tools"][:tools], "messages": messages,
            "max_tokens": 8, "temperature": 0, "stream": True}


def main() -> None:
    from runtime.server.launcher import ServiceProcess

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--other", default="smollm2-135m", help="the model whose requests unload --model")
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--tools", type=int, default=4, help="how many of the 25 recorded tools each request sends")
    ap.add_argument("--directories", type=int, default=3)
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--cache-ram", type=int, help="MiB of the host tier (default: the service's)")
    ap.add_argument("--cache-disk", type=int, help="MiB of the disk tier (default: the service's)")
    args = ap.parse_args()
    model_path(args.model)
    model_path(args.other)
    env = {k: v for k, v in os.environ.items() if k != "HEARTH_CACHE_DISK"}  # the default disk tier
    env["HEARTH_KEEP_ALIVE"] = "-1"
    flags = ["--model", args.model, "--ctx", str(args.ctx), "--parallel", "1", "--max-models", "1"]
    if args.cache_ram is not None:
        flags += ["--cache-ram", str(args.cache_ram)]
    if args.cache_disk is not None:
        flags += ["--cache-disk", str(args.cache_disk)]
    rows: list[dict] = []
    server = ServiceProcess(*flags, env=env).wait_ready(600)
    try:
        def send(d: int, s: int, t: int) -> dict:
            row = {"directory": d, "session": s, "turn": t, **ask(server.url, body(args.model, args.tools, d, s, t))}
            rows.append(row)
            return row

        for d in range(args.directories):
            if d:  # another model's request: this one's worker ends, the next directory starts a new one
                r = httpx.post(f"{server.url}/v1/messages", timeout=3600, json={
                    "model": args.other, "max_tokens": 2, "messages": [{"role": "user", "content": "Hi"}]})
                r.raise_for_status()
            for s in range(args.sessions):
                for t in range(2):
                    send(d, s, t)
        new = send(0, args.sessions, 0)
        send(0, args.sessions, 1)
        kv = next(m for m in server.stats()["models"] if m["id"] == args.model)["kv"]
    finally:
        server.stop()
    shared = max((r["cached_tokens"] for r in rows if r["directory"] == 0 and 0 < r["session"] < args.sessions
                  and r["turn"] == 0), default=0)
    emit({"benchmark": "agent_directories", "model": args.model, "ctx": args.ctx, "tools": args.tools,
          "requests": rows, "new_session": {"cached_tokens": new["cached_tokens"], "shared": shared,
                                            "prompt_tokens": new["prompt_tokens"]},
          "host_tier": kv.get("host_tier"), "disk_tier": kv.get("disk_tier")})


if __name__ == "__main__":
    main()
