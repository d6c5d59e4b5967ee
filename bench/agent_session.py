"""A Claude Code session replayed against Hearth and llama-server: TTFT and cached share per turn.

The session is the recorded shape of Claude Code's first request (``tests/server/agent_requests/
claude_code.json``: its 25 tools, ~20k tokens of system prompt and reminders, with filler in place
of the words), grown turn by turn as the client grows it: the assistant's reply and a new user
message are appended, and every request re-sends the whole conversation, tools included. Each
turn goes to Hearth and to llama-server (both on /v1/messages, the same body, the same model and
context, one after the other on the quiet machine). Then Hearth is restarted and the last turn
is sent again: its prefix comes back from the disk tier of the prompt cache; it is compared with
an uncached prefill of the same length (the same body with its first system line changed).

Turn by turn on /v1/messages the two do not prefill the same prompt (llama-server leaves the
tools out for Gemma's template, which has no tool support; Hearth describes them in the prompt), so
the same session is also sent as one raw prompt per turn (``same_prompt``: Hearth's
/v1/completions, llama-server's /completion with ``cache_prompt``), the same tokens to both.

After the turns, a second session's first request (the same tools and system prompt, a new
conversation) gives the cached share a new session of the same agent gets.

Targets: every turn after the first at or below 1.0x llama-server's TTFT; after a restart at or
below 0.2x an uncached prefill.

    python bench/agent_session.py [--turns 4] [--model gemma-3-270m] [--ctx 32768]
                                  [--peer /path/to/llama-server]
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import time
import urllib.request
from pathlib import Path

import httpx
from common import ROOT, emit, model_path

SHAPE = ROOT / "tests" / "server" / "agent_requests" / "claude_code.json"
REPLIES = ["I'll look at the project layout first.", "The tests live under tests/; I will run them next.",
           "Done: the failing test now passes.", "Nothing else needs to change."]
ASKS = ["List the Python files here.", "Now run the tests.", "Fix the failing one.", "Anything left?"]


def session(turns: int, max_tokens: int) -> list[dict]:
    """The request bodies of a ``turns``-turn session, each one re-sending the whole history."""
    base = json.loads(SHAPE.read_text())["body"]
    for k in ("metadata", "context_management", "output_config", "thinking"):
        base.pop(k, None)
    base.update(stream=True, max_tokens=max_tokens, temperature=0)
    # The system message Claude Code puts after its first user turn joins that turn here (as
    # Hearth does), so llama-server, which wants system text first, gets the same prompt.
    messages: list[dict] = []
    for m in base["messages"]:
        if m["role"] == "system" and messages and messages[-1]["role"] == "user":
            messages[-1]["content"].append({"type": "text", "text": m["content"]})
        else:
            messages.append(copy.deepcopy(m))
    bodies = []
    for t in range(turns):
        if t:
            messages += [{"role": "assistant", "content": [{"type": "text", "text": REPLIES[(t - 1) % len(REPLIES)]}]},
                         {"role": "user", "content": [{"type": "text", "text": ASKS[t % len(ASKS)]}]}]
        bodies.append({**base, "messages": copy.deepcopy(messages)})
    return bodies


def ask(url: str, body: dict) -> dict:
    """TTFT (first content delta, keep-alives not counted), prompt tokens and cached tokens."""
    start, first, use = time.perf_counter(), None, {}
    with httpx.stream("POST", f"{url}/v1/messages", json=body, timeout=3600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if first is None and "content_block_delta" in line:
                first = time.perf_counter() - start
            if line.startswith("data: {") and '"usage"' in line:
                doc = json.loads(line[6:])
                u = doc.get("usage") or doc.get("message", {}).get("usage") or {}
                use.update({k: v for k, v in u.items() if v is not None})
    total = time.perf_counter() - start
    cached = use.get("cache_read_input_tokens", 0) or 0
    prompt = (use.get("input_tokens", 0) or 0) + cached
    return {"ttft_s": round(first if first is not None else total, 3), "prompt_tokens": prompt,
            "cached_tokens": cached, "cached_share": round(cached / prompt, 3) if prompt else None}


def as_text(body: dict) -> str:
    """The body as one raw prompt in Gemma's turn format (system text, the tools as JSON, the
    turns): the same text to both servers, so both prefill the same tokens (llama-server's
    /v1/messages leaves the tools out for a template without tool support: 2.8k tokens of
    the 20k)."""
    system = "\n".join(b["text"] for b in body.get("system", []))
    tools = json.dumps(body.get("tools", []), separators=(",", ":"))
    turns = []
    for i, m in enumerate(body["messages"]):
        text = m["content"] if isinstance(m["content"], str) else "\n".join(b.get("text", "") for b in m["content"])
        if i == 0:
            text = f"{system}\n\n# Tools\n{tools}\n\n{text}"
        role = "model" if m["role"] == "assistant" else "user"
        turns.append(f"<start_of_turn>{role}\n{text}<end_of_turn>\n")
    return "<bos>" + "".join(turns) + "<start_of_turn>model\n"


def ask_text(url: str, prompt: str, max_tokens: int, native: bool) -> dict:
    """TTFT of a raw prompt: llama-server's /completion (``native``) or Hearth's /v1/completions."""
    path, body = (("/completion", {"prompt": prompt, "n_predict": max_tokens, "cache_prompt": True})
                  if native else ("/v1/completions", {"prompt": prompt, "max_tokens": max_tokens,
                                                       "stream_options": {"include_usage": True}}))
    start, first, prompt_n, cached = time.perf_counter(), None, 0, 0
    with httpx.stream("POST", f"{url}{path}", json={**body, "stream": True, "temperature": 0}, timeout=3600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            doc = json.loads(line[6:])
            text = doc.get("content") if native else "".join(c.get("text", "") for c in doc.get("choices") or [])
            if first is None and text:
                first = time.perf_counter() - start
            if native and doc.get("timings"):
                prompt_n, cached = doc["timings"]["prompt_n"] + doc["timings"].get("cache_n", 0), doc["timings"].get("cache_n", 0)
            if not native and doc.get("usage"):
                prompt_n = doc["usage"]["prompt_tokens"]
                cached = (doc["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    total = time.perf_counter() - start
    return {"ttft_s": round(first if first is not None else total, 3), "prompt_tokens": prompt_n,
            "cached_tokens": cached, "cached_share": round(cached / prompt_n, 3) if prompt_n else None}


def _ready(url: str, proc: subprocess.Popen, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                doc = json.loads(r.read())
            if doc.get("status") == "ok" or doc.get("engine", {}).get("state") == "running":
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} was not ready")


def hearth(model: str, ctx: int, port: int) -> subprocess.Popen:
    from runtime.self_command import hearth_argv

    return subprocess.Popen([*hearth_argv(), "serve", "--port", str(port), "--model", model, "--ctx", str(ctx),
                             "--parallel", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def llama_server(binary: str, path: Path, ctx: int, port: int) -> subprocess.Popen:
    # two slots of the whole context each (Hearth's --ctx is across its two slots: it shares one pool)
    return subprocess.Popen([binary, "-m", str(path), "--port", str(port), "-c", str(ctx * 2), "-np", "2",
                             "--jinja"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--ctx", type=int, default=32768)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--peer", help="a llama-server binary built from the same llama.cpp")
    args = ap.parse_args()
    path = model_path(args.model)
    bodies = [{**b, "model": args.model} for b in session(args.turns, args.max_tokens)]
    result: dict = {"benchmark": "agent_session", "model": args.model, "ctx": args.ctx, "turns": []}
    url = "http://127.0.0.1:4391"
    proc = hearth(args.model, args.ctx, 4391)
    peer = llama_server(args.peer, path, args.ctx, 4392) if args.peer else None
    try:
        _ready(url, proc)
        if peer is not None:
            _ready("http://127.0.0.1:4392", peer)
        for i, body in enumerate(bodies):
            row = {"turn": i + 1, "hearth": ask(url, body)}
            if peer is not None:
                row["llama_server"] = ask("http://127.0.0.1:4392", body)
                row["ratio"] = round(row["hearth"]["ttft_s"] / max(row["llama_server"]["ttft_s"], 1e-6), 3)
            result["turns"].append(row)
        # A second session of the same agent: its tools and system prompt are the first one's, its
        # conversation new (Claude Code started again in the same project).
        second = copy.deepcopy(bodies[0])
        second["messages"][0]["content"][1] = {"type": "text", "text": "A new session: what does this project do?"}
        result["second_session"] = ask(url, second)
        if peer is not None:  # the same tokens to both: the engines and their prompt caches compared
            result["same_prompt"] = []
            for i, body in enumerate(bodies):
                text = as_text(body)
                row = {"turn": i + 1, "hearth": ask_text(url, text, args.max_tokens, False),
                       "llama_server": ask_text("http://127.0.0.1:4392", text, args.max_tokens, True)}
                row["ratio"] = round(row["hearth"]["ttft_s"] / max(row["llama_server"]["ttft_s"], 1e-6), 3)
                result["same_prompt"].append(row)
        proc.terminate()
        proc.wait(60)
        proc = hearth(args.model, args.ctx, 4391)  # a restart: the prompt cache's disk tier survives it
        _ready(url, proc)
        restored = ask(url, bodies[-1])
        cold_body = copy.deepcopy(bodies[-1])
        cold_body["system"][0] = {"type": "text", "text": f"Session {time.time()}: a prompt no cache holds."}
        cold = ask(url, cold_body)
        result["after_restart"] = {"restored": restored, "uncached": cold,
                                   "ratio": round(restored["ttft_s"] / max(cold["ttft_s"], 1e-6), 3)}
    finally:
        proc.terminate()
        if peer is not None:
            peer.terminate()
    emit(result)


if __name__ == "__main__":
    main()
