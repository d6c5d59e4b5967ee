"""Several resident models: a resident model's latency while another loads, and the cost of
switching between two resident models against switching by reloading.

    .venv/bin/python bench/router.py [--rounds 6]

Prints JSON:

- ``ttft_resident_idle_s`` / ``ttft_resident_while_loading_s``: time to first token of a
  request to the resident SmolLM2 with nothing else happening, and while Gemma 3 270M loads
  (requests sent only inside the load's window), with ``load_s`` the load's own duration:
  the request must not wait for the load.
- ``switch_resident_s`` / ``switch_reload_s``: time to first token of requests alternating
  between the two models, both resident (one service), and with ``--max-models 1`` (each
  switch unloads one model and loads the other, as a one-model service does).
- ``memory``: the workers' resident set of each model against the planner's estimate.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import common  # noqa: F401  (sets a temporary data directory first)
import httpx

from common import emit, model_path

SMOL, GEMMA = "smollm2-135m", "gemma-3-270m"


def ttft(url: str, model: str) -> float:
    body = {"model": model, "prompt": "Hello", "max_tokens": 2, "stream": True}
    t0 = time.perf_counter()
    first = None
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=300) as r:
        r.raise_for_status()
        for line in r.iter_lines():  # read to the end: the next request finds the engine idle
            if first is None and line.startswith("data: {") and '"text":""' not in line.replace(" ", ""):
                first = time.perf_counter() - t0
    if first is None:
        raise RuntimeError("no token")
    return first


def while_loading(url: str) -> dict:
    """TTFTs of SmolLM2 requests sent while Gemma loads."""
    httpx.post(f"{url}/hearth/models/{GEMMA}/unload", timeout=60).raise_for_status()
    done = threading.Event()
    span: list[float] = []

    def load() -> None:
        t0 = time.perf_counter()
        httpx.post(f"{url}/hearth/models/{GEMMA}/load", json={}, timeout=300).raise_for_status()
        span.append(time.perf_counter() - t0)
        done.set()

    t = threading.Thread(target=load)
    t.start()
    time.sleep(0.05)  # the load has started (the worker is spawning)
    times = []
    while not done.is_set():
        times.append(ttft(url, SMOL))
    t.join()
    return {"ttft_resident_while_loading_s": times, "load_s": round(span[0], 3)}


def alternate(url: str, rounds: int) -> list[float]:
    out = []
    for i in range(rounds):
        out.append(ttft(url, GEMMA if i % 2 == 0 else SMOL))
    return out


def med(xs: list[float]) -> float:
    return round(statistics.median(xs), 4)


def main() -> None:
    from runtime.server.launcher import ServiceProcess

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    model_path(SMOL), model_path(GEMMA)
    common_args = ("--parallel", "2", "--ctx", "1024")
    s = ServiceProcess(*common_args).wait_ready()
    try:
        ttft(s.url, SMOL)  # warm
        idle = [ttft(s.url, SMOL) for _ in range(args.rounds)]
        loading = while_loading(s.url)
        alternate(s.url, 2)  # both resident and warm
        resident = alternate(s.url, args.rounds)
        stats = s.stats()
        memory = {m["id"]: {"rss_bytes": m["memory"]["rss_bytes"],
                            "planned_ram_bytes": m["memory"]["planned"]["ram_bytes"]} for m in stats["models"]}
        loads_resident = stats["loads"]
    finally:
        s.stop()
    one = ServiceProcess(*common_args, "--max-models", "1").wait_ready()
    try:
        reload = alternate(one.url, args.rounds)
        loads_reload = one.stats()["loads"]
    finally:
        one.stop()
    total_rss = sum(m["rss_bytes"] or 0 for m in memory.values())
    total_plan = sum(m["planned_ram_bytes"] for m in memory.values())
    emit({
        "ttft_resident_idle_s": med(idle),
        "ttft_resident_while_loading_s": med(loading["ttft_resident_while_loading_s"]),
        "requests_during_load": len(loading["ttft_resident_while_loading_s"]),
        "load_s": loading["load_s"],
        "switch_resident_s": med(resident),
        "switch_reload_s": med(reload),
        "loads": {"resident": loads_resident, "reload": loads_reload},
        "memory": {**memory, "total_rss_bytes": total_rss, "total_planned_ram_bytes": total_plan,
                   "rss_over_planned": round(total_rss / total_plan, 3) if total_plan else None},
    })


if __name__ == "__main__":
    main()
