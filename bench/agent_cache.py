"""An agent's session against the prompt cache: turns, then a restart of the service.

A coding agent sends a long system prompt (instructions and tool definitions) and the whole
conversation with every request. This generates such a prompt (about 15k tokens for Gemma 3
270M, whose context is 32k; about 6k for SmolLM2-135M, whose trained context is 8k), runs a
few turns against ``hearth serve`` (default cache settings, the disk tier on), stops the
service, starts it again and sends the next turn: its prefix comes back from disk. Last, a
request with a prompt of the same length that shares nothing with the session gives the
uncached prefill to compare with. Target (the coding-agents work): every turn after the
first reads >= 90% of its prompt from cache, and the turn after the restart takes <= 0.2x
the uncached prefill.

    python bench/agent_cache.py [--models gemma-3-270m,smollm2-135m] [--turns 4]
"""

from __future__ import annotations

import argparse
import json
import os
import time

from common import emit, model_path

#: the generated system prompt's size per model, in tool definitions, and the context to load
SIZES = {"gemma-3-270m": (132, 24576), "smollm2-135m": (52, 8192)}
ACTIONS = ["reads a file", "writes a file", "searches text", "runs a command", "lists a folder"]
QUESTIONS = ["List the files of the project.", "Open the file that defines the service's settings.",
             "Which function reads the config?", "Add a flag for the cache size.", "Run the tests."]


def system_prompt(tools: int, salt: str = "") -> str:
    """Instructions and ``tools`` JSON tool definitions, as agents send them (generated)."""
    head = (f"{salt}You are a coding agent working in the user's repository. Read before you edit, keep changes "
            "small, run the tests after each change, and explain what you did in one short paragraph.\n"
            "# Tools\nCall a tool with a JSON object naming it and giving its arguments.\n")
    defs = []
    for i in range(tools):
        defs.append(json.dumps({
            "name": f"tool_{i}_{['read', 'write', 'search', 'run', 'list'][i % 5]}",
            "description": f"Tool {i}: acts on the repository ({ACTIONS[i % 5]}); "
                           f"returns at most {200 + i} lines; fails with not_found or too_large.",
            "parameters": {"type": "object", "properties": {
                "path": {"type": "string", "description": "a path relative to the repository root"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 1000 + i}},
                "required": ["path"]}}))
    return head + "\n".join(defs)


def ask(url: str, model: str, messages: list[dict], max_tokens: int = 16) -> dict:
    """One streamed chat request: its time to first token, reply, prompt and cached tokens."""
    import httpx

    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    ttft, text, usage = None, [], {}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=1800) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            elif chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                ttft = ttft if ttft is not None else time.perf_counter() - start
                text.append(chunk["choices"][0]["delta"]["content"])
    prompt = usage.get("prompt_tokens", 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    return {"ttft_s": round(ttft if ttft is not None else time.perf_counter() - start, 3),
            "prompt_tokens": prompt, "cached_tokens": cached,
            "cached_share": round(cached / prompt, 3) if prompt else 0.0, "reply": "".join(text)}


def session(model: str, turns: int) -> dict:
    from runtime.server.launcher import ServiceProcess

    tools, ctx = SIZES[model]
    model_path(model)
    args = ("--model", model, "--ctx", str(ctx), "--parallel", "1")
    env = {k: v for k, v in os.environ.items() if k != "HEARTH_CACHE_DISK"}  # the default disk tier
    env["HEARTH_KEEP_ALIVE"] = "-1"
    messages = [{"role": "system", "content": system_prompt(tools)}]
    rows = []
    server = ServiceProcess(*args, env=env).wait_ready()
    try:
        for i in range(turns):
            messages.append({"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]})
            row = ask(server.url, model, messages)
            messages.append({"role": "assistant", "content": row.pop("reply") or "OK."})
            rows.append({"turn": i + 1, **row})
    finally:
        server.stop()
    server = ServiceProcess(*args, env=env).wait_ready()
    try:
        messages.append({"role": "user", "content": QUESTIONS[turns % len(QUESTIONS)]})
        after = ask(server.url, model, messages)
        after.pop("reply")
        # the same length, nothing in common with the session: an uncached prefill
        cold = ask(server.url, model, [{"role": "system", "content": system_prompt(tools, "Session 2. ")},
                                       *messages[1:]])
        cold.pop("reply")
        kv = server.stats()["models"][0]["kv"]
    finally:
        server.stop()
    return {"model": model, "ctx": ctx, "turns": rows, "after_restart": after, "uncached": cold,
            "restart_vs_uncached": round(after["ttft_s"] / cold["ttft_s"], 3) if cold["ttft_s"] else None,
            "host_tier": kv.get("host_tier"), "disk_tier": kv.get("disk_tier")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gemma-3-270m,smollm2-135m")
    ap.add_argument("--turns", type=int, default=4)
    args = ap.parse_args()
    emit({"benchmark": "agent_cache", "threads": os.cpu_count(),
          "sessions": [session(m, args.turns) for m in args.models.split(",")]})


if __name__ == "__main__":
    main()
