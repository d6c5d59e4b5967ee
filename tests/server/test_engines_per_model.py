"""One engine per model file, whatever the ``num_ctx``: a smaller context uses the resident
engine, a larger one reloads the model with it (once the engine is idle); the service never has
two worker processes of one model. Each distinct ``num_ctx`` used to start another worker, each
kept for ever with ``keep_alive: -1``."""

from __future__ import annotations

import threading
import time

import httpx
import ollama
import psutil
import pytest

from tests.server.conftest import live_server

SMOL = "smollm2-135m"


@pytest.fixture(scope="module")
def server(smollm2_path):
    s = live_server("--parallel", "2", "--ctx", "1024", "--load-wait", "300")  # a loaded machine decodes slowly
    yield s
    s.stop()


def workers(server) -> list[psutil.Process]:
    """The service's worker processes (multiprocessing's spawned children)."""
    return [c for c in psutil.Process(server.proc.pid).children(recursive=True)
            if any("spawn_main" in part for part in c.cmdline())]


def resident(server) -> list[dict]:
    return [m for m in server.stats()["models"] if m["id"] == SMOL]


def generate(server, num_ctx: int, num_predict: int = 1) -> httpx.Response:
    return httpx.post(f"{server.url}/api/generate", timeout=300, json={
        "model": SMOL, "prompt": "Hi", "stream": False, "keep_alive": -1,
        "options": {"num_predict": num_predict, "num_ctx": num_ctx}})


def test_several_num_ctx_values_keep_one_worker(server):
    loads = server.stats()["loads"][SMOL]
    largest = 1024
    for n in (512, 2048, 1024, 4096, 768):
        r = generate(server, n)
        assert r.status_code == 200 and r.json()["eval_count"] == 1, r.text
        largest = max(largest, n)
        engines = resident(server)
        assert [m["ctx"] for m in engines] == [largest], (n, engines)
        assert len(workers(server)) == 1, (n, [w.pid for w in workers(server)])
    assert server.stats()["loads"][SMOL] == loads + 2  # reloaded for 2048 and for 4096 only
    r = ollama.Client(host=server.url, timeout=120).ps()
    assert [m.model for m in r.models] == [f"{SMOL}:latest"]


def test_a_larger_context_waits_for_the_running_request_then_reloads(server):
    ctx = resident(server)[0]["ctx"]
    first: dict = {}

    def long_request() -> None:  # no context asked for: the resident engine serves it
        r = httpx.post(f"{server.url}/v1/completions", timeout=300, json={
            "model": SMOL, "prompt": "Once upon a time", "max_tokens": 24, "ignore_eos": True})
        first.update(status=r.status_code, end=time.monotonic(), tokens=r.json()["usage"]["completion_tokens"])

    t = threading.Thread(target=long_request)
    t.start()
    deadline = time.monotonic() + 30
    while not any(m["active"] for m in resident(server)) and time.monotonic() < deadline:
        time.sleep(0.01)
    asked = time.monotonic()
    r = generate(server, ctx * 2)
    second_end = time.monotonic()
    t.join(120)
    print(f"the long request ended {first['end'] - asked:.2f} s after the larger context was asked for, "
          f"which was served {second_end - asked:.2f} s after it was asked")
    assert first["status"] == 200 and first["tokens"] == 24  # not cut short by the reload
    assert r.status_code == 200, r.text
    assert first["end"] <= second_end
    assert [m["ctx"] for m in resident(server)] == [ctx * 2] and len(workers(server)) == 1
