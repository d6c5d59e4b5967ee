"""One model across several machines, on loopback: two real ``hearth rpc-worker`` processes
(ggml's RPC server, each offering as much memory as this machine has free) and a ``hearth serve --rpc`` whose fit plan splits
SmolLM2 over them and this machine's CPU. The split service gives the greedy text of the
model alone, with speculation (prompt lookup) and the prefix cache on; a worker killed
mid-stream ends that stream with ``engine_stopped`` (the service lives on) and the next
request loads the model again without the dead worker."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from runtime.backends.ggml_rpc import rpc_built
from tests.rpc_workers import start_workers
from tests.server.conftest import live_server

pytestmark = pytest.mark.skipif(not rpc_built(), reason="llama-cpp-python built without GGML_RPC: run `make test`")

PROMPTS = ["Once upon a time", "The capital of France is", "def fibonacci(n):", "List three colors:"]
SETTINGS = ("--parallel", "2", "--ctx", "2048", "--threads", "1")


def greedy(url: str, prompt: str, max_tokens: int = 24) -> dict:
    r = httpx.post(f"{url}/v1/completions", json={"prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
                   timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def reference(smollm2_path) -> dict[str, str]:
    s = live_server(*SETTINGS)
    try:
        return {p: greedy(s.url, p)["choices"][0]["text"] for p in PROMPTS}
    finally:
        s.stop()


def rss(pid: int) -> int:
    import psutil

    return psutil.Process(pid).memory_info().rss


@pytest.fixture(scope="module")
def workers():
    import psutil

    # each worker offers what this machine has free, so the planner gives each device a third
    ws = start_workers(2, mem_mib=psutil.virtual_memory().available >> 20)
    for w in ws:
        w.rss_idle = rss(w.proc.pid)
    yield ws
    for w in ws:
        w.stop()


@pytest.fixture(scope="module")
def split(workers, reference):
    s = live_server(*SETTINGS, "--draft", "ngram", "--rpc", ",".join(w.endpoint for w in workers))
    yield s
    s.stop()


def test_prefix_cache_and_speculation_still_work_over_the_split(split):
    # a count goes on as it went before: prompt lookup drafts it from the prompt itself (first
    # in this module: the speculator adapts to what it has seen, and stories draft poorly)
    before = split.stats()["models"][0]["spec"]
    texts = []
    for start in (1, 3):
        prompt = ", ".join(str(i) for i in range(start, start + 20)) + f", {start}, {start + 1}, {start + 2},"
        first = greedy(split.url, prompt, 32)
        second = greedy(split.url, prompt, 32)
        assert second["choices"][0]["text"] == first["choices"][0]["text"]
        assert second["usage"]["prompt_tokens_details"]["cached_tokens"] >= 16
        texts.append(first["choices"][0]["text"])
    assert texts[0].startswith(" 4, 5, 6, 7") and texts[1].startswith(" 6, 7, 8, 9")
    after = split.stats()["models"][0]["spec"]
    assert after["drafted"] > before["drafted"] and after["accepted"] > before["accepted"]


def test_the_split_model_gives_the_greedy_text_of_the_model_alone(split, workers, reference):
    planned = split.stats()["models"][0]["memory"]["planned"]["gpu_bytes"]
    assert set(planned) == {"RPC0", "RPC1"} and all(n > 20 << 20 for n in planned.values())
    for w in workers:  # the workers hold their layers' weights (SmolLM2's are 3 MB a layer)
        assert rss(w.proc.pid) - w.rss_idle > 15 << 20, w.endpoint
    for prompt, text in reference.items():
        assert greedy(split.url, prompt)["choices"][0]["text"] == text, prompt
    rpc = {e["endpoint"]: e for e in split.health()["rpc"]}
    assert set(rpc) == {w.endpoint for w in workers}
    assert all(e["state"] == "in_use" and e["models"] == ["smollm2-135m"] for e in rpc.values())


def test_a_worker_killed_mid_stream_fails_that_stream_and_the_model_reloads_without_it(split, workers, reference):
    pid = split.stats()["models"][0]["pid"]
    body = {"prompt": "Tell me a long story.", "max_tokens": 2000, "stream": True, "ignore_eos": True}
    events: list[str] = []
    done: list[float] = []

    def stream() -> None:
        with httpx.stream("POST", f"{split.url}/v1/completions", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line:
                    events.append(line)
        done.append(time.monotonic())

    t = threading.Thread(target=stream)
    t.start()
    while len(events) < 5 and t.is_alive():
        time.sleep(0.01)
    killed_at = time.monotonic()
    workers[1].kill()
    t.join(30)
    assert done and done[0] - killed_at < 10
    assert '"engine_stopped"' in events[-2] and events[-1] == "data: [DONE]"
    assert split.proc.poll() is None  # the service itself lives on
    assert split.health()["engine"]["state"] == "crashed"

    # the next request loads the model again, over the worker that is left and this machine
    assert greedy(split.url, PROMPTS[0])["choices"][0]["text"] == reference[PROMPTS[0]]
    model = split.stats()["models"][0]
    assert model["pid"] != pid and set(model["memory"]["planned"]["gpu_bytes"]) == {"RPC0"}
    rpc = {e["endpoint"]: e for e in split.health()["rpc"]}
    assert rpc[workers[0].endpoint]["state"] == "in_use"
    assert rpc[workers[1].endpoint]["state"] == "down"
