"""Embedding work has a budget and ends with its client: a request over the per-request token
limit is a 400 naming the limit and the input count; a huge request runs a batch at a time, so
a small one sent while it runs is answered before it ends; a request whose client left stops
using the embedding worker."""

from __future__ import annotations

import threading
import time

import httpx
import psutil
import pytest

from runtime.engine.embed_messages import MAX_JOB_TOKENS

WORDS = ("the quick brown fox jumps over a lazy dog while the river keeps running past old stone bridges "
         "and people talk about weather markets music football science gardens travel and food").split()


def texts(n: int, words: int) -> list[str]:
    return [" ".join(WORDS[(i + k) % len(WORDS)] for k in range(words)) + f" {i}." for i in range(n)]


@pytest.fixture(scope="module")
def server(minilm_path):
    from tests.server.conftest import live_server

    s = live_server("--ctx", "1024", "--max-client-requests", "64")
    assert embed(s, {"input": "load the embedding model"}).status_code == 200
    yield s
    s.stop()


def embed(server, body: dict, timeout: float = 300) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/embeddings", json={"model": "minilm-l6", **body}, timeout=timeout)


def worker(server) -> psutil.Process:
    models = {m["id"]: m for m in server.stats()["models"]}
    return psutil.Process(models["minilm-l6"]["pid"])


def counters(server) -> dict:
    return {m["id"]: m for m in server.stats()["models"]}["minilm-l6"]["embeddings"]


def cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


@pytest.mark.parametrize("route, field", [("/v1/embeddings", "input"), ("/api/embed", "input")])
def test_a_request_over_the_token_limit_is_a_400_naming_the_limit_and_the_inputs(server, route, field):
    many = texts(2048, 300)  # each cut at the model's 256 tokens: 524,288 tokens in all
    r = httpx.post(f"{server.url}{route}", json={"model": "minilm-l6", "input": many}, timeout=300)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    message = err["message"] if isinstance(err, dict) else err
    assert f"{MAX_JOB_TOKENS}" in message and "2048 inputs" in message and "524288 tokens" in message
    if isinstance(err, dict):
        assert err["param"] == field and err["code"] == "context_length_exceeded"
    assert embed(server, {"input": texts(4, 10)}).status_code == 200  # the worker serves on


def test_a_small_request_is_answered_while_a_huge_one_runs(server):
    huge = texts(192, 60)  # about 70 tokens each, 12 batches: seconds of the worker
    done: dict[str, float] = {}

    def run_huge() -> None:
        r = embed(server, {"input": huge})
        done["huge"] = time.monotonic()
        done["huge_status"] = r.status_code
        done["huge_inputs"] = len(r.json()["data"]) if r.status_code == 200 else 0

    t = threading.Thread(target=run_huge)
    started = time.monotonic()
    t.start()
    time.sleep(0.5)
    t0 = time.monotonic()
    r = embed(server, {"input": ["a short question", "and another"]})
    done["small"] = time.monotonic()
    assert r.status_code == 200 and len(r.json()["data"]) == 2
    t.join(600)
    wait, whole = done["small"] - t0, done["huge"] - started
    print(f"huge request {whole:.2f} s; the small one waited {wait:.3f} s")
    assert done["huge_status"] == 200 and done["huge_inputs"] == 192
    assert done["small"] < done["huge"], "the small request waited for the whole huge one"
    assert wait < whole / 3


def test_a_request_whose_client_left_stops_using_the_worker(server):
    proc, before = worker(server), counters(server)
    left = time.monotonic()
    try:
        embed(server, {"input": texts(2048, 100)}, timeout=1.5)  # the client gives up and hangs up
        raise AssertionError("the huge request finished within 1.5 s: it cannot test cancellation")
    except httpx.TimeoutException:
        pass
    # the batch running when the client left ends; then the worker is idle (its threads do not spin)
    deadline, quiet = time.monotonic() + 30, None
    while quiet is None and time.monotonic() < deadline:
        c0 = cpu(proc)
        time.sleep(1.0)
        if cpu(proc) - c0 < 0.1:
            quiet = time.monotonic() - left
    print(f"the worker was idle {quiet} s after the client left")
    assert quiet is not None, "the worker kept computing for a request nobody waits for"
    after = counters(server)
    assert after["cancelled"] == before["cancelled"] + 1 and after["active"] == 0
    assert after["inputs"] == before["inputs"]  # nothing was answered for it
    assert worker(server).pid == proc.pid
    assert embed(server, {"input": "still here"}).status_code == 200
