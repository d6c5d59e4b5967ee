"""A small embedding request while a huge one runs, and what a huge one costs once its client left.

One service with the embedding model minilm-l6 (2 threads). A client sends one request of
``--inputs`` long texts (2,048 by default, each cut at the model's 256 tokens, or shorter: the
request stays under the per-request token limit); while it runs, another client sends one-input
requests every ``--every`` seconds and times each. Then the huge request is sent again and its
client hangs up after one second: the embedding worker's CPU time is read over the next seconds
(it should stop rising), and one small request is timed.

    .venv/bin/python bench/embed_fairness.py [--inputs 2048] [--words 60]

Prints JSON: ``huge_s`` (the huge request's own time), ``small_wait_s`` (each small request's
latency while the huge one ran: ``max``, ``median``, all), ``after_cancel`` (worker CPU seconds
used in the 3 s after the client left; a small request's latency then).
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import common  # noqa: F401  (sets a temporary data directory first)
import httpx
import psutil

from common import emit, model_path

WORDS = ("the quick brown fox jumps over a lazy dog while the river keeps running past old stone bridges "
         "and people talk about weather markets music football science gardens travel and food").split()


def texts(n: int, words: int) -> list[str]:
    return [" ".join(WORDS[(i + k) % len(WORDS)] for k in range(words)) + f" {i}." for i in range(n)]


def small(url: str) -> float:
    t0 = time.perf_counter()
    r = httpx.post(f"{url}/v1/embeddings", json={"model": "minilm-l6", "input": "a short question"}, timeout=600)
    r.raise_for_status()
    return time.perf_counter() - t0


def worker_pid(url: str) -> int:
    models = httpx.get(f"{url}/hearth/stats", timeout=60).json()["models"]
    return next(m["pid"] for m in models if m["id"] == "minilm-l6")


def main() -> None:
    from runtime.server.launcher import ServiceProcess

    ap = argparse.ArgumentParser()
    ap.add_argument("--inputs", type=int, default=2048)
    ap.add_argument("--words", type=int, default=60)
    ap.add_argument("--every", type=float, default=0.5)
    args = ap.parse_args()
    model_path("minilm-l6")
    model_path("smollm2-135m")
    s = ServiceProcess("--ctx", "1024").wait_ready()
    try:
        url = s.url
        small(url)  # warm
        body = {"model": "minilm-l6", "input": texts(args.inputs, args.words)}
        result: dict = {}

        def huge() -> None:
            t0 = time.perf_counter()
            r = httpx.post(f"{url}/v1/embeddings", json=body, timeout=1800)
            result["huge_s"] = round(time.perf_counter() - t0, 2)
            result["huge_status"] = r.status_code
            if r.status_code == 200:
                result["huge_tokens"] = r.json()["usage"]["prompt_tokens"]

        t = threading.Thread(target=huge)
        t.start()
        time.sleep(1.0)
        waits = []
        while t.is_alive():
            waits.append(round(small(url), 3))
            time.sleep(args.every)
        t.join()
        result["small_wait_s"] = {"max": max(waits, default=None), "median": statistics.median(waits) if waits else None,
                                  "count": len(waits), "all": waits}
        pid = worker_pid(url)
        proc = psutil.Process(pid)

        def abandoned() -> None:
            try:
                httpx.post(f"{url}/v1/embeddings", json=body, timeout=1.0)
            except httpx.TimeoutException:
                pass  # the client hangs up: the service sees the connection close

        abandoned()
        c0 = sum(proc.cpu_times()[:2])
        time.sleep(3.0)
        c1 = sum(proc.cpu_times()[:2])
        result["after_cancel"] = {"worker_cpu_s_in_3s": round(c1 - c0, 2), "small_s": round(small(url), 3),
                                  "worker_pid_same": worker_pid(url) == pid}
        result["inputs"], result["words"] = args.inputs, args.words
        emit(result)
    finally:
        s.stop()


if __name__ == "__main__":
    main()
