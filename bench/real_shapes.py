"""Real model shapes: the fit planner's prediction, Hearth and llama-server, with random weights.

Models at the exact shapes of Llama 3.2 1B, Qwen3 4B and Llama 3.1 8B (every tensor at its real
size, the real tokenizer and chat template, random weights, Q4_K_M by llama.cpp's quantizer:
``bench/shape_models.py``, where each number's source is given) are written once into a cache
folder (``--models``, default ``$HEARTH_DATA_DIR/bench-shapes``: set HEARTH_DATA_DIR to keep
them between runs; the 8B takes 16 GB of disk while its F16 file exists). Random weights cost
the same time and memory as trained ones: a matrix multiply, the quantizer and the KV cache do
not look at the values, only the text the model writes is meaningless (nothing here reads it).

For each shape:

- the fit planner's prediction for this machine (``runtime.hardware.fit.plan_fit`` at the
  context used, one sequence, f16 KV): the host memory of the worker process and the decode
  tokens/s (calibrated first with ``runtime.hardware.calibrate`` when this machine is not yet);
- Hearth (``hearth serve --model FILE --ctx CTX --parallel 1``) and then llama-server (``-m FILE
  -c CTX -np 1``), never both at once, the same threads, batch 512, f16 KV cache, each measured
  on the same raw prompts in the family's chat format (Hearth's /v1/completions, llama-server's
  /completion with ``cache_prompt``: the same tokens to both), greedy, ``ignore_eos``:
  - TTFT of a cold prompt of ``--prompt-tokens`` tokens (the time of a one-token completion: the
    prefill, one decode step and the HTTP round trip, the same for both);
  - TTFT of the next turn of that chat (the prompt, an assistant answer, a new short user
    message): what the prefix cache saves (the cached tokens each server reports are given). It
    is sent ``READ_PAUSE_S`` after the answer, as a client that reads the answer (or runs a tool)
    would: Hearth saves a finished request's cells to host memory once its answer is out (0.1 s
    for 2k tokens of the 1B); sent back to back, that save lands in the next request;
  - decode tokens/s of one stream from a ~448-token prompt: ``(n_long - n_short) / (t_long -
    t_short)`` of a ``--decode-tokens`` and a 16-token completion of the same (cached) prompt,
    so prefill and overhead cancel; llama-server's own ``predicted_per_second`` beside it;
  - memory after the requests: PSS and RSS of the process tree from /proc (the service and its
    workers; ``bench/footprint.py``), Hearth's llama worker against the prediction.
- predicted against measured (ratios; targets: memory within 10%, speed within 30%) and Hearth
  against llama-server for each figure (ratios, Hearth over llama-server).

The planner's memory figure is the context's full size (attention buffers for every cell);
``predicted_at_used_cells_mib`` gives it with the compute buffer sized for the cells the
requests used, since only written pages are resident on the CPU.

    python bench/real_shapes.py [--shapes llama-3.2-1b,qwen3-4b,llama-3.1-8b] [--models DIR]
        [--ctx 8192] [--prompt-tokens 2048] [--decode-tokens 128] [--threads N]
        [--peer /path/to/llama-server] [--calibrate auto|yes|no]
    python bench/real_shapes.py --smoke --peer /path/to/llama-server   # two layers, n_embd 256: seconds

``--peer`` defaults to ``$HEARTH_LLAMA_SERVER``; without either only Hearth is measured. The
default shapes are the first two; ``--prompt-tokens`` defaults to 2048 (512 for the 8B).
Progress and the time of each step go to stderr, the result (one JSON object) to stdout.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
import uuid
from pathlib import Path

import httpx
from agent_session import _ready
from common import ROOT, emit
from footprint import free_port, stop, tree_memory
from shape_models import SHAPES, SMOKE_SHAPES, Shape, build, log

from runtime.config import data_dir
from runtime.hardware.fit import FitPlan, plan_fit
from runtime.hardware.memory import Settings, compute_bytes, pad_ctx
from runtime.hardware.probe import probe
from runtime.hardware.shape import ModelShape, shape_from_gguf

MIB = 1 << 20
TARGETS = {"memory": 0.10, "speed": 0.30}
DEFAULT_SHAPES = "llama-3.2-1b,qwen3-4b"
SHORT_DECODE = 16
NOTE = ("random weights: every matrix multiply, the quantizer and the KV cache cost the same time and bytes as "
        "with trained weights; only the generated text is meaningless, and nothing here depends on it")
ANSWER = "Here is a short summary of the notes: they list places, people and the things they did."
NEXT_ASK = "Thanks. Which of these notes mention the harbour?"
WORDS = ("quiet", "harbour", "engineer", "lantern", "river", "copper", "garden", "winter", "market", "signal",
         "orchard", "teacher", "bridge", "violet", "station", "archive", "meadow", "captain", "pebble", "tunnel")


READ_PAUSE_S = 1.0  #: between an answer and the next turn (see the module docstring)


def chat_turn(shape: Shape, user: str) -> str:
    """One user message and the start of the assistant's reply, in the family's format (the
    BOS token is the servers' to add: both add it where the vocabulary asks for it)."""
    if shape.family == "qwen":
        return f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
    return f"<|start_header_id|>user<|end_header_id|>\n\n{user}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"


def next_turn(shape: Shape, prompt: str) -> str:
    """``prompt`` answered, and a new user message after it."""
    end = "<|im_end|>\n" if shape.family == "qwen" else "<|eot_id|>"
    return prompt + ANSWER + end + chat_turn(shape, NEXT_ASK)


def _sentence(i: int) -> str:
    w = WORDS
    return (f"Note {i}: the {w[i % 20]} {w[(i * 7 + 3) % 20]} met the {w[(i * 3 + 1) % 20]} by the "
            f"{w[(i * 11 + 5) % 20]} at {i % 12 + 1} o'clock.")


class Prompts:
    """Raw chat prompts of about N tokens, counted with the model's own tokenizer."""

    def __init__(self, path: Path, shape: Shape) -> None:
        import llama_cpp

        self.shape = shape
        self.vocab = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)

    def count(self, text: str) -> int:
        return len(self.vocab.tokenize(text.encode(), add_bos=True, special=True))

    def of_tokens(self, n: int, topic: str) -> str:
        """A first user turn of at most ``n`` tokens (the most whole sentences that fit)."""
        head = f"Session {uuid.uuid4().hex[:12]}. {topic}\n\n"

        def text(k: int) -> str:
            return chat_turn(self.shape, head + " ".join(_sentence(i) for i in range(k)))

        lo, hi = 0, max(n // 8, 1)
        while self.count(text(hi)) <= n:
            lo, hi = hi, hi * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.count(text(mid)) <= n else (lo, mid)
        return text(lo)


class Server:
    """Hearth or llama-server serving one file: one-token and n-token completions, memory."""

    def __init__(self, kind: str, path: Path, args: argparse.Namespace) -> None:
        self.kind, self.path, self.port = kind, path, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        log_file = open(data_dir() / f"real-shapes-{kind}-{self.port}.log", "w")  # noqa: SIM115 (the process's)
        if kind == "hearth":
            from runtime.self_command import hearth_argv

            cmd = [*hearth_argv(), "serve", "--port", str(self.port), "--model", str(path), "--ctx", str(args.ctx),
                   "--parallel", "1", "--threads", str(args.threads), "--batch", "512", "--kv-type", "f16",
                   "--cache-disk", "0"]
        else:
            cmd = [args.peer, "-m", str(path), "--port", str(self.port), "-c", str(args.ctx), "-np", "1",
                   "-t", str(args.threads), "-b", "512", "-ub", "512", "--no-webui"]
        env = {**os.environ, "HEARTH_KEEP_ALIVE": "-1", "PYTHONPATH": str(ROOT)}
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
        self.client = httpx.Client(timeout=3600)

    def ready(self) -> None:
        _ready(self.url, self.proc, timeout=1800)

    def complete(self, prompt: str, max_tokens: int) -> dict:
        """A greedy completion of exactly ``max_tokens`` tokens: its wall time, prompt tokens,
        cached prompt tokens and tokens generated."""
        if self.kind == "hearth":
            path, body = "/v1/completions", {"model": str(self.path), "prompt": prompt, "max_tokens": max_tokens}
        else:
            path, body = "/completion", {"prompt": prompt, "n_predict": max_tokens, "cache_prompt": True}
        t = time.perf_counter()
        r = self.client.post(self.url + path, json={**body, "temperature": 0, "ignore_eos": True})
        wall = time.perf_counter() - t
        r.raise_for_status()
        doc = r.json()
        if self.kind == "hearth":
            u = doc["usage"]
            return {"s": wall, "prompt_tokens": u["prompt_tokens"], "generated": u["completion_tokens"],
                    "cached_tokens": (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)}
        tm = doc.get("timings") or {}
        cached = tm.get("cache_n", 0)
        return {"s": wall, "prompt_tokens": tm.get("prompt_n", 0) + cached, "cached_tokens": cached,
                "generated": doc.get("tokens_predicted", tm.get("predicted_n")),
                "server_tokens_per_s": tm.get("predicted_per_second")}

    def stats(self) -> dict | None:
        if self.kind != "hearth":
            return None
        try:
            return self.client.get(self.url + "/hearth/stats").json()
        except (httpx.HTTPError, ValueError):
            return None

    def close(self) -> None:
        self.client.close()
        stop(self.proc)


def measure(kind: str, path: Path, args: argparse.Namespace, cold: str, decode_prompt: str, shape: Shape) -> dict:
    """One server, started, measured and stopped (see the module docstring)."""
    log(f"{path.stem}: starting {kind}")
    s = Server(kind, path, args)
    try:
        s.ready()
        s.complete("Hello there, how are you?", 2)  # loads the model (Hearth loads it on first use)
        out: dict = {"start_to_first_reply_s": round(time.perf_counter() - s.started, 2)}
        log(f"{path.stem}: {kind} answered {out['start_to_first_reply_s']} s after its start")
        first = s.complete(cold, 1)
        time.sleep(READ_PAUSE_S)
        second = s.complete(next_turn(shape, cold), 1)
        out["ttft_cold"] = _ttft(first)
        out["ttft_next_turn"] = _ttft(second)
        log(f"{path.stem}: {kind} TTFT cold {out['ttft_cold']['s']} s, next turn {out['ttft_next_turn']['s']} s")
        s.complete(decode_prompt, 1)  # the decode prompt's prefill, cached for the two below
        rates, server_rates = [], []
        for _ in range(args.repeats):
            long, short = s.complete(decode_prompt, args.decode_tokens), s.complete(decode_prompt, SHORT_DECODE)
            if long["generated"] != args.decode_tokens or short["generated"] != SHORT_DECODE:
                raise RuntimeError(f"{kind} generated {long['generated']} and {short['generated']} tokens, "
                                   f"not {args.decode_tokens} and {SHORT_DECODE}")
            rates.append((long["generated"] - short["generated"]) / max(long["s"] - short["s"], 1e-6))
            if long.get("server_tokens_per_s"):
                server_rates.append(long["server_tokens_per_s"])
        out["decode"] = {"tokens_per_s": round(statistics.median(rates), 2), "runs": [round(r, 2) for r in rates],
                         "prompt_tokens": long["prompt_tokens"], "tokens": args.decode_tokens}
        if server_rates:
            out["decode"]["server_reported_tokens_per_s"] = round(statistics.median(server_rates), 2)
        log(f"{path.stem}: {kind} decodes {out['decode']['tokens_per_s']} tokens/s")
        out["cells_used_max"] = max(second["prompt_tokens"] + 1, long["prompt_tokens"] + args.decode_tokens)
        time.sleep(0.5)  # settle: freed pages returned, helper processes ended
        mem = tree_memory(s.proc.pid)
        out["memory"] = {"tree_pss_mib": mem["pss_mib"], "tree_rss_mib": mem["rss_mib"],
                         "processes": [{k: p[k] for k in ("role", "pss_mib", "rss_mib", "anon_mib")}
                                       for p in mem["processes"]]}
        if kind == "hearth":
            workers = [p for p in mem["processes"] if p["role"] == "llama worker"]
            out["memory"]["worker_pss_mib"] = round(sum(p["pss_mib"] for p in workers), 1)
            out["memory"]["worker_rss_mib"] = round(sum(p["rss_mib"] for p in workers), 1)
            stats = s.stats() or {}
            if stats.get("planned"):
                out["memory"]["service_planned_mib"] = round(stats["planned"].get("ram_bytes", 0) / MIB, 1)
            tiers = [(m.get("kv") or {}).get("host_tier") or {} for m in stats.get("models", [])]
            out["memory"]["host_tier_mib"] = round(sum((t.get("states") or {}).get("bytes", 0)
                                                       + (t.get("checkpoints") or {}).get("bytes", 0)
                                                       for t in tiers) / MIB, 1)
        return out
    finally:
        s.close()
        log(f"{path.stem}: {kind} stopped")


def _ttft(r: dict) -> dict:
    return {"s": round(r["s"], 3), "prompt_tokens": r["prompt_tokens"], "cached_tokens": r["cached_tokens"]}


def predicted(shape: ModelShape, hw, args: argparse.Namespace) -> tuple[FitPlan, dict]:
    plan = plan_fit(shape, hw, ctx=args.ctx, kv_type="f16", n_seq=1)
    out = {"verdict": plan.verdict, "ctx": plan.ctx, "kv_type": plan.kv_type, "gpu_layers": plan.gpu_layers,
           "memory_mib": round(plan.ram_bytes / MIB, 1),
           "parts_mib": {k: round(getattr(plan, f"{k}_bytes") / MIB, 1)
                         for k in ("weights", "repacked", "kv", "compute", "overhead")},
           "decode_tokens_per_s": round(plan.predicted_tokens_per_s, 2) if plan.predicted_tokens_per_s else None,
           "speed_calibrated": plan.speed_calibrated,
           "decode_limit_tokens_per_s": round(plan.decode_limit_tps, 2) if plan.decode_limit_tps else None}
    return plan, out


def at_used_cells(shape: ModelShape, plan: FitPlan, cells: int) -> float:
    """The plan's host memory with the compute buffer sized for ``cells`` cells of attention."""
    flash = plan.kv_type != "f16" or plan.gpu_layers > 0  # as runtime.hardware.memory.estimate decides
    used = compute_bytes(shape, Settings(ctx=pad_ctx(min(cells, plan.ctx)), kv_type=plan.kv_type, n_seq=1), 1, flash)
    return (plan.ram_bytes - plan.compute_bytes + min(used, plan.compute_bytes)) / MIB


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def compare(pred: dict, plan: FitPlan, shape: ModelShape, hearth: dict, peer: dict | None) -> tuple[dict, dict | None]:
    mem = hearth["memory"]["worker_pss_mib"]
    used = at_used_cells(shape, plan, hearth["cells_used_max"])
    speed = hearth["decode"]["tokens_per_s"]
    m, u, v = _ratio(pred["memory_mib"], mem), _ratio(used, mem), _ratio(pred["decode_tokens_per_s"], speed)
    vs = {"memory": {"predicted_mib": pred["memory_mib"], "predicted_at_used_cells_mib": round(used, 1),
                     "measured_worker_pss_mib": mem, "measured_worker_rss_mib": hearth["memory"]["worker_rss_mib"],
                     "ratio": m, "ratio_at_used_cells": u,
                     "within_target": m is not None and abs(m - 1) <= TARGETS["memory"],
                     "within_target_at_used_cells": u is not None and abs(u - 1) <= TARGETS["memory"]},
          "speed": {"predicted_tokens_per_s": pred["decode_tokens_per_s"], "measured_tokens_per_s": speed,
                    "ratio": v, "within_target": v is not None and abs(v - 1) <= TARGETS["speed"]}}
    if peer is None:
        return vs, None
    vs["memory"]["llama_server_tree_rss_mib"] = peer["memory"]["tree_rss_mib"]
    vs["memory"]["ratio_to_llama_server_rss"] = _ratio(pred["memory_mib"], peer["memory"]["tree_rss_mib"])
    vs["speed"]["ratio_to_llama_server"] = _ratio(pred["decode_tokens_per_s"], peer["decode"]["tokens_per_s"])
    h_vs_p = {"decode_tokens_per_s": _ratio(speed, peer["decode"]["tokens_per_s"]),
              "ttft_cold": _ratio(hearth["ttft_cold"]["s"], peer["ttft_cold"]["s"]),
              "ttft_next_turn": _ratio(hearth["ttft_next_turn"]["s"], peer["ttft_next_turn"]["s"]),
              "tree_pss": _ratio(hearth["memory"]["tree_pss_mib"], peer["memory"]["tree_pss_mib"]),
              "tree_rss": _ratio(hearth["memory"]["tree_rss_mib"], peer["memory"]["tree_rss_mib"]),
              "start_to_first_reply": _ratio(hearth["start_to_first_reply_s"], peer["start_to_first_reply_s"])}
    return vs, h_vs_p


def run_shape(shape: Shape, folder: Path, hw, args: argparse.Namespace) -> dict:
    t = time.perf_counter()
    path, steps = build(shape, folder)
    model = shape_from_gguf(path)
    plan, pred = predicted(model, hw, args)
    n_prompt = args.prompt_tokens or (128 if args.smoke else 512 if shape.name == "llama-3.1-8b" else 2048)
    prompts = Prompts(path, shape)
    cold = prompts.of_tokens(n_prompt, "Summarise these notes.")
    decode_prompt = prompts.of_tokens(args.decode_prompt_tokens, "Write a long story about these notes.")
    row: dict = {"shape": shape.name, "file_mib": round(path.stat().st_size / MIB, 1), "build": steps,
                 "n_params": model.n_params, "bits_per_weight": model.bits_per_weight,
                 "prompt_tokens": prompts.count(cold), "next_turn_prompt_tokens": prompts.count(next_turn(shape, cold)),
                 "decode_prompt_tokens": prompts.count(decode_prompt), "predicted": pred}
    del prompts
    row["hearth"] = measure("hearth", path, args, cold, decode_prompt, shape)
    row["llama_server"] = measure("llama-server", path, args, cold, decode_prompt, shape) if args.peer else None
    row["predicted_vs_measured"], row["hearth_vs_llama_server"] = compare(pred, plan, model, row["hearth"],
                                                                           row["llama_server"])
    row["seconds"] = round(time.perf_counter() - t, 1)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help=f"of {', '.join(SHAPES)} (default %(default)s)")
    ap.add_argument("--models", type=Path, help="cache folder of the models (default $HEARTH_DATA_DIR/bench-shapes)")
    ap.add_argument("--ctx", type=int, help="context of both servers (default 8192; 2048 with --smoke)")
    ap.add_argument("--prompt-tokens", type=int, help="cold prompt (default 2048, 512 for the 8B, 128 with --smoke)")
    ap.add_argument("--decode-prompt-tokens", type=int, help="prompt before the decode (default 448; 64 with --smoke)")
    ap.add_argument("--decode-tokens", type=int, help="tokens of the long decode (default 128; 48 with --smoke)")
    ap.add_argument("--repeats", type=int, default=1, help="decode measurements, median (default %(default)s)")
    ap.add_argument("--threads", type=int, help="threads of both servers (default: physical cores)")
    ap.add_argument("--peer", default=os.environ.get("HEARTH_LLAMA_SERVER"),
                    help="a llama-server built from the llama.cpp that llama-cpp-python vendors")
    ap.add_argument("--calibrate", choices=["auto", "yes", "no"], default="auto",
                    help="calibrate the decode prediction first (auto: when this machine is not yet)")
    ap.add_argument("--smoke", action="store_true", help="two-layer, n_embd 256 models of both layouts: seconds")
    args = ap.parse_args()
    import psutil

    args.threads = args.threads or psutil.cpu_count(logical=False) or os.cpu_count() or 1
    args.ctx = args.ctx or (2048 if args.smoke else 8192)
    args.decode_prompt_tokens = args.decode_prompt_tokens or (64 if args.smoke else 448)
    args.decode_tokens = args.decode_tokens or (48 if args.smoke else 128)
    if args.peer and not Path(args.peer).is_file():
        raise SystemExit(f"no llama-server at {args.peer}")
    catalog = SMOKE_SHAPES if args.smoke else SHAPES
    names = list(SMOKE_SHAPES) if args.smoke else [n.strip() for n in args.shapes.split(",") if n.strip()]
    unknown = [n for n in names if n not in catalog]
    if unknown:
        raise SystemExit(f"unknown shapes {', '.join(unknown)}: use {', '.join(SHAPES)}")
    folder = args.models or data_dir() / "bench-shapes"
    t = time.perf_counter()
    hw = probe()
    calibration = None
    if args.calibrate == "yes" or (args.calibrate == "auto" and hw.decode_efficiency is None):
        from runtime.hardware.calibrate import calibrate_decode

        log("calibrating the decode prediction (runtime.hardware.calibrate)")
        cal = calibrate_decode(hardware=hw)
        calibration = {"efficiency": round(cal.efficiency, 3), "fixed_ms": round(cal.fixed_s * 1000, 2)}
    elif hw.decode_efficiency is not None:
        calibration = {"efficiency": round(hw.decode_efficiency, 3), "fixed_ms": round(hw.decode_fixed_s * 1000, 2),
                       "stored": True}
    log(f"machine probed in {time.perf_counter() - t:.1f} s")
    rows = [run_shape(catalog[n], folder, hw, args) for n in names]
    emit({
        "benchmark": "real_shapes", "smoke": args.smoke,
        "machine": {"cpu": hw.cpu.model, "physical_cores": hw.cpu.physical_cores,
                    "ram_gib": round(hw.ram.total / (1 << 30), 1),
                    "bandwidth_gb_s": round(hw.memory_bandwidth / 1e9, 1) if hw.memory_bandwidth else None,
                    "load_average": [round(x, 2) for x in os.getloadavg()]},
        "calibration": calibration,
        "settings": {"ctx": args.ctx, "parallel": 1, "threads": args.threads, "batch": 512, "kv_type": "f16",
                     "decode_tokens": args.decode_tokens, "short_decode_tokens": SHORT_DECODE,
                     "peer": args.peer, "models": str(folder)},
        "targets": TARGETS, "note": NOTE, "shapes": rows,
    })


if __name__ == "__main__":
    main()
