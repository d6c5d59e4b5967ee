"""Worker processes of one model after Ollama requests with several ``num_ctx`` values.

One service (``--ctx 1024``) with the embedded SmolLM2; one ``/api/generate`` per ``num_ctx``
in ``--ctx-values`` (each with ``keep_alive: -1``), then the service's worker processes are
counted (its children started by multiprocessing's spawn) and its resident engines listed.

    .venv/bin/python bench/engines_per_model.py [--ctx-values 512,2048,1024,4096]

Prints JSON: ``workers`` (worker processes of the service), ``resident`` (model id and context
of each resident engine), ``loads`` (loads per model), ``seconds`` (all requests).
"""

from __future__ import annotations

import argparse
import time

import common  # noqa: F401  (sets a temporary data directory first)
import httpx
import psutil

from common import emit, model_path


def workers(pid: int) -> int:
    return sum(1 for c in psutil.Process(pid).children(recursive=True)
               if any("spawn_main" in part for part in c.cmdline()))


def main() -> None:
    from runtime.server.launcher import ServiceProcess

    ap = argparse.ArgumentParser()
    ap.add_argument("--ctx-values", default="512,2048,1024,4096")
    args = ap.parse_args()
    values = [int(x) for x in args.ctx_values.split(",")]
    model_path("smollm2-135m")
    s = ServiceProcess("--ctx", "1024").wait_ready()
    try:
        t0 = time.perf_counter()
        for n in values:
            r = httpx.post(f"{s.url}/api/generate", timeout=600, json={
                "model": "smollm2-135m", "prompt": "Hi", "stream": False, "keep_alive": -1,
                "options": {"num_predict": 1, "num_ctx": n}})
            r.raise_for_status()
        stats = s.stats()
        emit({"ctx_values": values, "workers": workers(s.proc.pid),
              "resident": [{"id": m["id"], "ctx": m["ctx"]} for m in stats["models"]],
              "loads": stats["loads"], "seconds": round(time.perf_counter() - t0, 2)})
    finally:
        s.stop()


if __name__ == "__main__":
    main()
