"""Several models resident at once: no reload between them, eviction within a budget, pins,
one load for concurrent first requests, keep-alive and num_ctx per model, crash isolation."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import ollama
import pytest
from openai import OpenAI

from tests.server.conftest import live_server

SMOL, GEMMA = "smollm2-135m", "gemma-3-270m"
CHAT = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def two(smollm2_path, gemma_path):
    s = live_server("--parallel", "2", "--ctx", "1024")
    yield s
    s.stop()


def _post(s, path: str, body: dict | None = None, timeout: float = 120) -> httpx.Response:
    return httpx.post(f"{s.url}{path}", json=body or {}, timeout=timeout)


def _resident(s) -> dict[str, dict]:
    return {m["id"]: m for m in s.stats()["models"]}


def _chat(s, model: str, max_tokens: int = 2) -> httpx.Response:
    return _post(s, "/v1/chat/completions", {"model": model, "messages": CHAT, "max_tokens": max_tokens})


def test_two_models_serve_interleaved_streams_without_reloading(two):
    oai = OpenAI(base_url=f"{two.url}/v1", api_key="unused", max_retries=0, timeout=120)
    texts: dict[str, list[str]] = {SMOL: [], GEMMA: []}

    errors: list[BaseException] = []

    finished: list[str | None] = []

    def stream(model: str) -> None:
        parts, reason = [], None
        try:
            for chunk in oai.chat.completions.create(model=model, messages=CHAT, max_tokens=3, stream=True):
                if chunk.choices and chunk.choices[0].delta.content:
                    parts.append(chunk.choices[0].delta.content)
                if chunk.choices and chunk.choices[0].finish_reason:
                    reason = chunk.choices[0].finish_reason
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)
        texts[model].append("".join(parts))
        finished.append(reason)

    for _ in range(2):  # both models stream at the same time, twice
        threads = [threading.Thread(target=stream, args=(m,)) for m in (SMOL, GEMMA, SMOL, GEMMA)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert not errors, errors
    # every stream ran to its end (a sampled reply may be an end of turn at once: no text)
    assert all(len(v) == 4 and any(v) for v in texts.values()), texts
    assert len(finished) == 8 and all(r in ("stop", "length") for r in finished), finished
    stats = two.stats()
    assert stats["loads"] == {SMOL: 1, GEMMA: 1} and stats["unloads"] == {}
    resident = _resident(two)
    assert set(resident) == {SMOL, GEMMA} and resident[SMOL]["pid"] != resident[GEMMA]["pid"]
    assert all(m["memory"]["planned"]["ram_bytes"] > 0 and m["memory"]["rss_bytes"] > 0 for m in resident.values())
    assert {m.model for m in ollama.Client(host=two.url).ps().models} == {f"{SMOL}:latest", f"{GEMMA}:latest"}
    listed = {m["id"]: m for m in httpx.get(f"{two.url}/v1/models").json()["data"]}
    for mid in (SMOL, GEMMA):
        assert listed[mid]["loaded"] and listed[mid]["memory"]["planned"]["ram_bytes"] > 0
        assert "completion" in listed[mid]["capabilities"] and "embedding" not in listed[mid]["capabilities"]
        assert listed[mid]["context_length"] == resident[mid]["max_request_tokens"]
    # SmolLM2's GGUF has a chat template; Gemma 3 270M is a base model without one
    assert "chat" in listed[SMOL]["capabilities"] and "chat" not in listed[GEMMA]["capabilities"]
    health = two.health()["engine"]
    assert health["state"] == "running" and {m["id"] for m in health["models"]} == {SMOL, GEMMA}


def test_concurrent_first_requests_load_the_model_once(two):
    assert _post(two, f"/hearth/models/{GEMMA}/unload").json() == {"unloaded": [GEMMA]}
    before = two.stats()["loads"][GEMMA]
    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(_chat(two, GEMMA).status_code)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == [200, 200, 200]
    assert two.stats()["loads"][GEMMA] == before + 1


def test_a_smaller_num_ctx_reuses_the_resident_engine(two):
    client = ollama.Client(host=two.url, timeout=120)
    loads = two.stats()["loads"][SMOL]
    r = client.generate(model=SMOL, prompt="Hi", options={"num_predict": 2, "num_ctx": 512})
    assert r.eval_count == 2
    smol = [m for m in two.stats()["models"] if m["id"] == SMOL]
    assert len(smol) == 1 and smol[0]["ctx"] == 1024  # one engine per model: the larger context serves
    assert two.stats()["loads"][SMOL] == loads  # reused, not reloaded
    for bad, param in (({"ctx": 0}, "ctx"), ({"pin": "yes"}, "pin"), ({"keep_alive": "soon"}, "keep_alive")):
        r = _post(two, f"/hearth/models/{SMOL}/load", bad)
        assert r.status_code == 400 and r.json()["error"]["param"] == param
    assert _post(two, "/hearth/models/no-such-model/load").status_code == 404


def test_keep_alive_is_per_model(two):
    r = _post(two, f"/hearth/models/{GEMMA}/load", {"keep_alive": "1s"})
    assert r.status_code == 200 and r.json()["keep_alive"] == 1.0
    _chat(two, SMOL)
    deadline = time.monotonic() + 30
    while GEMMA in _resident(two) and time.monotonic() < deadline:
        time.sleep(0.2)
    resident = _resident(two)
    assert GEMMA not in resident and SMOL in resident
    assert two.stats()["unloads"][GEMMA] >= 1


def test_a_killed_worker_leaves_the_other_model_serving(two):
    assert _chat(two, GEMMA).status_code == 200
    victim = _resident(two)[GEMMA]["pid"]
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while GEMMA in _resident(two) and time.monotonic() < deadline:
        time.sleep(0.05)
    states = {m["id"]: m["state"] for m in two.health()["engine"]["models"]}
    assert states[GEMMA] == "crashed" and "running" in [states[k] for k in states if k != GEMMA]
    assert _chat(two, SMOL).status_code == 200
    assert _chat(two, GEMMA).status_code == 200  # restarted
    assert _resident(two)[GEMMA]["pid"] != victim


# -- a budget that holds one of the two models ----------------------------------------------
@pytest.fixture(scope="module")
def one(two):
    planned = {m["id"]: m["memory"]["planned"]["ram_bytes"]
               for m in httpx.get(f"{two.url}/v1/models").json()["data"] if m["id"] in (SMOL, GEMMA) and m["loaded"]}
    assert len(planned) == 2
    budget = max(planned.values()) + min(planned.values()) // 2
    s = live_server("--parallel", "2", "--ctx", "1024", "--memory-budget", str(budget), "--load-wait", "1.5")
    yield s
    s.stop()


def test_a_budget_for_one_model_unloads_the_idle_one(one):
    assert set(_resident(one)) == {SMOL}
    assert _chat(one, GEMMA).status_code == 200
    stats = one.stats()
    assert set(_resident(one)) == {GEMMA} and stats["unloads"] == {SMOL: 1}
    assert stats["planned"]["ram_bytes"] <= stats["budget"]["ram_bytes"]


def test_a_busy_model_is_never_unloaded_to_make_room(one):
    body = {"model": GEMMA, "prompt": "Count:", "max_tokens": 900, "ignore_eos": True, "stream": True}
    got_first = threading.Event()
    chunks: list[str] = []

    def stream() -> None:
        with httpx.stream("POST", f"{one.url}/v1/completions", json=body, timeout=120) as r:
            for line in r.iter_lines():
                if line:
                    chunks.append(line)
                    got_first.set()
                if stop.is_set():
                    break

    stop = threading.Event()
    t = threading.Thread(target=stream)
    t.start()
    try:
        assert got_first.wait(120)
        pid = _resident(one)[GEMMA]["pid"]
        r = _chat(one, SMOL)
        assert r.status_code == 503 and r.json()["error"]["code"] == "model_busy"
        assert int(r.headers["Retry-After"]) > 0
        assert _resident(one)[GEMMA]["pid"] == pid and chunks[-1] != "data: [DONE]"
    finally:
        stop.set()
        t.join(60)


def test_a_pinned_model_stays(one):
    r = _post(one, f"/hearth/models/{GEMMA}/load", {"pin": True})
    assert r.status_code == 200 and r.json()["pinned"] is True and r.json()["expires_at"] is None
    deadline = time.monotonic() + 10
    while any(m["active"] for m in one.stats()["models"]) and time.monotonic() < deadline:
        time.sleep(0.1)  # the cancelled stream of the previous test is gone
    r = _chat(one, SMOL)
    assert r.status_code == 503 and GEMMA in r.json()["error"]["message"]
    assert set(_resident(one)) == {GEMMA}
    assert _post(one, f"/hearth/models/{GEMMA}/unload").json() == {"unloaded": [GEMMA]}
    assert _chat(one, SMOL).status_code == 200 and set(_resident(one)) == {SMOL}
