"""Footprint: memory of the whole process tree and time from start to first token, Hearth
against llama-server, same model file and settings, measured side by side in one run.

Each start is a fresh process (``hearth serve`` or llama-server) on a free port; the client
sends a streaming completion at once and again every 20 ms until one is accepted, and the
time from the start to its first token is the start-up time. After that completion the
memory of the process and every descendant is read from ``/proc/PID/smaps_rollup``: PSS
(shared pages divided among the processes that map them, so the tree's sum is what it
takes) and RSS, per process and in all; and again after four clients' completions sent at
once (about 600 prompt tokens and 64 answered each). One warm-up start of each, then ``--repeats`` starts
of each, alternating; medians. Hearth's modules are compiled to bytecode first, as an installed
package's are.

Then (``--parts`` chooses):

- the embedding worker alone (the embedded MiniLM's ONNX file): its PSS and RSS against the
  model file (target: at most 120 MiB over the file);
- two small chat models resident at once (Gemma 3 270M and SmolLM2 135M): the planner's
  estimate (``/hearth/stats``'s ``planned``) against the workers' measured PSS (target:
  within 10%).

Targets: Hearth / llama-server at most 1.15 for both memory and start-up.

    python bench/footprint.py --peer /path/to/llama-server [--model gemma-3-270m]
        [--ctx 16384] [--parallel 8] [--threads 2] [--repeats 3] [--parts start,embed,resident]
        [--peer-swa-full] [--warm-start-ab]

``--peer`` defaults to ``$HEARTH_LLAMA_SERVER``; without either only Hearth is measured.
"""

from __future__ import annotations

import argparse
import compileall
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import ROOT, emit, model_path

MIB = 1 << 20
PROMPT = "Once upon a time, in a small village by the sea, there lived"
TARGETS = {"memory_ratio": 1.15, "start_ratio": 1.15, "embed_over_file_mib": 120, "planner_error": 0.10}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def smaps(pid: int) -> dict[str, int]:
    """PSS, RSS and anonymous bytes of one process (``smaps_rollup``)."""
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[0] in ("Rss:", "Pss:", "Anonymous:"):
                    out[parts[0][:-1].lower()] = int(parts[1]) * 1024
    except OSError:
        pass
    return out


def by_mapping(pid: int) -> dict[str, float]:
    """PSS in MiB by what is mapped: the model file, shared libraries and Python modules
    (code), anonymous memory (heaps, llama.cpp's KV and compute buffers, Python objects)."""
    out = {"model_file": 0, "code": 0, "anonymous": 0, "other": 0}
    kind = "other"
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split()
                if not head:
                    continue
                if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                    path = head[5] if len(head) > 5 else ""
                    if path.endswith((".gguf", ".onnx")):
                        kind = "model_file"
                    elif ".so" in path or path.endswith((".pyc", ".py")) or "/python" in path:
                        kind = "code"
                    elif not path or path.startswith("[heap]") or path.startswith("[anon") or path == "[stack]":
                        kind = "anonymous"
                    else:
                        kind = "other"
                elif head[0] == "Pss:":
                    out[kind] += int(head[1]) * 1024
    except OSError:
        pass
    return {k: round(v / MIB, 1) for k, v in out.items()}


def _libs(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return ""


def role(pid: int, root: int) -> str:
    if pid == root:
        return "service"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "gone"
    if "resource_tracker" in cmd:
        return "resource_tracker"
    maps = _libs(pid)
    if "libllama" in maps:
        return "llama worker"
    if "onnxruntime" in maps:
        return "embed worker"
    return "child"


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def tree_memory(pid: int) -> dict:
    procs = []
    for p in descendants(pid):
        m = smaps(p)
        if m:
            procs.append({"pid": p, "role": role(p, pid), "pss_mib": round(m.get("pss", 0) / MIB, 1),
                          "rss_mib": round(m.get("rss", 0) / MIB, 1),
                          "anon_mib": round(m.get("anonymous", 0) / MIB, 1), "pss_by_mapping_mib": by_mapping(p)})
    return {"pss_mib": round(sum(p["pss_mib"] for p in procs), 1),
            "rss_mib": round(sum(p["rss_mib"] for p in procs), 1), "processes": procs}


def first_token(port: int, body: dict, deadline: float) -> float | None:
    """Send the streaming completion until it is accepted; the time of its first token
    (None when the process has not answered by ``deadline``). Reads the stream to its end."""
    payload = json.dumps({**body, "stream": True}).encode()
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            c.request("POST", "/v1/completions", payload, {"Content-Type": "application/json"})
            r = c.getresponse()
        except OSError:
            time.sleep(0.02)
            continue
        if r.status != 200:  # llama-server answers 503 while it loads
            r.read()
            c.close()
            time.sleep(0.02)
            continue
        first = None
        for line in r:
            if first is None and line.startswith(b"data: {"):
                chunk = json.loads(line[6:])
                if chunk.get("choices") and chunk["choices"][0].get("text"):
                    first = time.perf_counter()
        c.close()
        return first
    return None


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def hearth_cmd(args, port: int, model: str) -> list[str]:
    return [sys.executable, "-m", "runtime.cli", "serve", "--port", str(port), "--model", model,
            "--ctx", str(args.ctx), "--parallel", str(args.parallel), "--threads", str(args.threads)]


def peer_cmd(args, port: int, path: Path) -> list[str]:
    return [args.peer, "-m", str(path), "--port", str(port), "-c", str(args.ctx), "-np", str(args.parallel),
            "-t", str(args.threads), "-b", "512", "-ub", "512", "--no-webui"]


def four_at_once(port: int, body: dict) -> None:
    """Four different prompts of about 600 tokens, 64 tokens each, sent at the same time."""
    def one(i: int) -> None:
        prompt = f"Client {i} keeps notes. " + " ".join(f"note {i}-{j}," for j in range(150))
        _get(port, "/v1/completions", {**body, "prompt": prompt, "max_tokens": 64, "stream": False})

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, range(4)))


def one_start(cmd: list[str], port: int, body: dict, env: dict) -> dict:
    # default settings, the prompt cache's disk tier included, but an empty one: every start
    # computes the same prompts as llama-server does
    shutil.rmtree(Path(env["HEARTH_DATA_DIR"]) / "prompt-cache", ignore_errors=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        t = first_token(port, body, time.monotonic() + 180)
        if t is None:
            raise RuntimeError(f"no first token from {cmd[0]} {' '.join(cmd[1:4])}")
        time.sleep(0.3)  # settle: freed pages returned, helper processes ended
        mem = tree_memory(proc.pid)
        four_at_once(port, body)
        time.sleep(0.3)
        after = tree_memory(proc.pid)
        return {"first_token_s": round(t - t0, 3), **mem, "pss_after_4_mib": after["pss_mib"],
                "rss_after_4_mib": after["rss_mib"], "processes_after_4": after["processes"]}
    finally:
        stop(proc)


def part_start(args, env: dict, gguf: Path) -> dict:
    body = {"prompt": PROMPT, "max_tokens": 16, "temperature": 0}
    sides = {"hearth": lambda p: hearth_cmd(args, p, args.model)}
    envs = {"hearth": env}
    if args.warm_start_ab:  # Hearth with and without the overlapped start-up, whatever the machine's default
        envs = {"hearth": {**env, "HEARTH_WARM_START": "1"}, "hearth (no warm start)": {**env, "HEARTH_WARM_START": "0"}}
        sides["hearth (no warm start)"] = sides["hearth"]
    if args.peer:
        sides["llama-server"] = lambda p: peer_cmd(args, p, gguf)
        if args.peer_swa_full:  # the KV layout Hearth's prefix cache needs: every layer keeps every cell
            sides["llama-server --swa-full"] = lambda p: [*peer_cmd(args, p, gguf), "--swa-full"]
    body_peer = {**body, "model": "x"}
    runs: dict[str, list[dict]] = {name: [] for name in sides}
    for i in range(args.repeats + 1):  # the first round warms the page cache and is dropped
        for name, cmd in sides.items():
            port = free_port()
            r = one_start(cmd(port), port, body if name.startswith("hearth") else body_peer, envs.get(name, env))
            if i:
                runs[name].append(r)
            print(f"# {'warm-up' if not i else f'run {i}'} {name}: {r['first_token_s']} s, "
                  f"{r['pss_mib']} MiB PSS", file=sys.stderr, flush=True)
    out = {}
    for name, rs in runs.items():
        med = sorted(rs, key=lambda r: r["pss_mib"])[len(rs) // 2]
        out[name] = {"first_token_s": statistics.median(r["first_token_s"] for r in rs),
                     "first_token_runs": [r["first_token_s"] for r in rs],
                     "pss_mib": statistics.median(r["pss_mib"] for r in rs),
                     "rss_mib": statistics.median(r["rss_mib"] for r in rs),
                     "pss_after_4_mib": statistics.median(r["pss_after_4_mib"] for r in rs),
                     "rss_after_4_mib": statistics.median(r["rss_after_4_mib"] for r in rs),
                     "processes_of_median_run": med["processes"],
                     "processes_after_4_of_median_run": med["processes_after_4"]}
    for peer in [name for name in out if name != "hearth"]:
        if peer == "hearth (no warm start)":
            out["warm_start_effect"] = {"first_token": round(out["hearth"]["first_token_s"] / out[peer]["first_token_s"], 2)}
            continue
        h, p = out["hearth"], out[peer]
        out[f"ratios to {peer}"] = {"first_token": round(h["first_token_s"] / p["first_token_s"], 2),
                                    "pss": round(h["pss_mib"] / p["pss_mib"], 2),
                                    "rss": round(h["rss_mib"] / p["rss_mib"], 2),
                                    "pss_after_4": round(h["pss_after_4_mib"] / p["pss_after_4_mib"], 2),
                                    "rss_after_4": round(h["rss_after_4_mib"] / p["rss_after_4_mib"], 2)}
    return out


def _get(port: int, path: str, body: dict | None = None) -> dict:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    c.request("POST" if body is not None else "GET", path, json.dumps(body).encode() if body is not None else None,
              {"Content-Type": "application/json"})
    r = c.getresponse()
    data = json.loads(r.read())
    c.close()
    if r.status != 200:
        raise RuntimeError(f"{path}: {r.status} {data}")
    return data


def _serve(args, env: dict, model: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    log = open(Path(env["HEARTH_DATA_DIR"]) / f"service-{port}.log", "w")  # noqa: SIM115 (the process's)
    proc = subprocess.Popen(hearth_cmd(args, port, model), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            _get(port, "/health")
            return proc, port
        except (OSError, RuntimeError):
            time.sleep(0.05)
    stop(proc)
    raise RuntimeError("the service did not answer /health")


def part_embed(args, env: dict) -> dict:
    onnx = model_path("minilm-l6")
    file_mib = sum(f.stat().st_size for f in onnx.parent.iterdir() if f.is_file()) / MIB
    proc, port = _serve(args, env, "minilm-l6")
    try:
        for _ in range(3):
            _get(port, "/v1/embeddings", {"model": "minilm-l6", "input": [PROMPT] * 8})
        time.sleep(0.3)
        procs = tree_memory(proc.pid)["processes"]
        worker = [p for p in procs if p["role"] == "embed worker"]
        w = worker[0] if worker else {"pss_mib": None, "rss_mib": None}
        return {"model_files_mib": round(file_mib, 1), "worker_pss_mib": w["pss_mib"], "worker_rss_mib": w["rss_mib"],
                "worker_over_file_mib": round(w["pss_mib"] - file_mib, 1) if w["pss_mib"] else None,
                "processes": procs}
    finally:
        stop(proc)


def part_resident(args, env: dict) -> dict:
    """Both models at ``--resident-ctx`` and ``--resident-parallel``, each given a prompt of
    most of that context, so that the attention buffers reach the size the planner counts."""
    at = argparse.Namespace(**{**vars(args), "ctx": args.resident_ctx, "parallel": args.resident_parallel})
    proc, port = _serve(at, env, "gemma-3-270m")
    long_prompt = "Notes: " + " ".join(f"item {i}," for i in range(int(args.resident_ctx * 0.13)))
    used = []
    try:
        for model in ("gemma-3-270m", "smollm2-135m"):
            r = _get(port, "/v1/completions", {"model": model, "prompt": long_prompt, "max_tokens": 4, "temperature": 0})
            used.append(r["usage"]["prompt_tokens"])
            _get(port, "/v1/completions", {"model": model, "prompt": PROMPT, "max_tokens": 16, "temperature": 0})
        time.sleep(0.3)
        stats = _get(port, "/hearth/stats")
        mem = tree_memory(proc.pid)
        workers = [p for p in mem["processes"] if p["role"] == "llama worker"]
        measured = sum(p["pss_mib"] for p in workers)
        planned = stats["planned"]["ram_bytes"] / MIB
        tiers = [m.get("kv", {}).get("host_tier") or {} for m in stats.get("models", [])]
        host = sum((t.get("states") or {}).get("bytes", 0) + (t.get("checkpoints") or {}).get("bytes", 0)
                   for t in tiers) / MIB
        beside = measured - host
        return {"resident": len(workers), "ctx": args.resident_ctx, "parallel": args.resident_parallel,
                "long_prompt_tokens": used, "planned_mib": round(planned, 1), "workers_pss_mib": round(measured, 1),
                "workers_rss_mib": round(sum(p["rss_mib"] for p in workers), 1),
                "host_tier_mib": round(host, 1), "workers_pss_less_host_tier_mib": round(beside, 1),
                "error": round(planned / measured - 1, 3) if measured else None,
                "error_less_host_tier": round(planned / beside - 1, 3) if beside else None,
                "processes": mem["processes"]}
    finally:
        stop(proc)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", default=os.environ.get("HEARTH_LLAMA_SERVER"),
                    help="a llama-server binary built from the llama.cpp that llama-cpp-python vendors")
    ap.add_argument("--peer-swa-full", action="store_true",
                    help="also llama-server with --swa-full (sliding-window layers keep the whole context, as Hearth)")
    ap.add_argument("--warm-start-ab", action="store_true",
                    help="Hearth with HEARTH_WARM_START=1 (the side named hearth) and =0, side by side")
    ap.add_argument("--model", default="gemma-3-270m", help="catalog id of an embedded chat model")
    ap.add_argument("--ctx", type=int, default=16384)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--resident-ctx", type=int, default=4096, help="context of each resident model (default 4096)")
    ap.add_argument("--resident-parallel", type=int, default=4, help="sequences of each resident model (default 4)")
    ap.add_argument("--parts", default="start,embed,resident",
                    help="which parts to run: start (side by side), embed, resident (default: all)")
    args = ap.parse_args()
    if args.peer and not shutil.which(args.peer):
        raise SystemExit(f"no llama-server at {args.peer}")
    gguf = model_path(args.model)  # copied into the data directory before the first start
    # Hearth's modules as an installed package has them (pip compiles them at install; a source
    # checkout writes them at its first start, unless PYTHONDONTWRITEBYTECODE forbids it there)
    compileall.compile_dir(str(ROOT / "runtime"), quiet=1)
    env = {**os.environ, "HEARTH_KEEP_ALIVE": "-1", "PYTHONPATH": str(ROOT)}
    result = {"model": args.model, "model_file_mib": round(gguf.stat().st_size / MIB, 1), "ctx": args.ctx,
              "parallel": args.parallel, "threads": args.threads, "repeats": args.repeats,
              "load_average": [round(x, 2) for x in os.getloadavg()],
              "load_average_cores": os.cpu_count()}
    parts = set(args.parts.split(","))
    if "start" in parts:
        result["start"] = part_start(args, env, gguf)
    if "embed" in parts:
        result["embedding_worker"] = part_embed(args, env)
    if "resident" in parts:
        result["two_resident"] = part_resident(args, env)
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    result["targets"] = TARGETS
    emit(result)


if __name__ == "__main__":
    main()
