"""SIGTERM: open streams get a proper end, the worker stops, the process exits 0."""

from __future__ import annotations

import json
import signal
import threading
import time

import httpx
import psutil

from tests.server.conftest import live_server

LONG = {"max_tokens": 1500, "ignore_eos": True, "stream": True}


def test_sigterm_ends_every_open_stream_cleanly(smollm2_path):
    server = live_server("--parallel", "4", "--ctx", "8192", "--shutdown-grace", "1")
    worker = server.health()["engine"]["pid"]
    results: dict[str, list[str]] = {}
    reading = threading.Barrier(5)

    def openai_stream(name: str, path: str, body: dict) -> None:
        with httpx.stream("POST", f"{server.url}{path}", json=body, timeout=120) as r:
            lines = r.iter_lines()
            got = [next(lines) for _ in range(3)]
            reading.wait(60)
            results[name] = got + [x for x in lines]

    threads = [
        threading.Thread(target=openai_stream, args=("chat", "/v1/chat/completions",
                                                     {"messages": [{"role": "user", "content": "Tell a story"}], **LONG})),
        threading.Thread(target=openai_stream, args=("text", "/v1/completions", {"prompt": "Once", **LONG})),
        threading.Thread(target=openai_stream, args=("ollama", "/api/generate", {
            "model": "smollm2-135m", "prompt": "Tell a story", "options": {"num_predict": 1500}})),
    ]

    def event_feed() -> None:  # a never-ending SSE feed, as the desktop app keeps open
        with httpx.stream("GET", f"{server.url}/hearth/downloads/events", timeout=120) as r:
            reading.wait(60)
            results["feed"] = list(r.iter_lines())

    threads.append(threading.Thread(target=event_feed))
    for t in threads:
        t.start()
    reading.wait(120)
    t0 = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(60)
    assert server.proc.wait(60) == 0
    assert time.monotonic() - t0 < 45  # not held for aiohttp's 60 s shutdown timeout by the feed
    assert "feed" in results
    assert not psutil.pid_exists(worker) or psutil.Process(worker).status() == psutil.STATUS_ZOMBIE

    for name in ("chat", "text"):
        events = [x for x in results[name] if x]
        assert events[-1] == "data: [DONE]", name
        last = json.loads(events[-2].removeprefix("data: "))
        assert last["error"]["code"] == "shutting_down", name
        for e in events[:-2]:
            assert "choices" in json.loads(e.removeprefix("data: ")), name
    lines = [json.loads(x) for x in results["ollama"] if x]
    assert "shutting down" in lines[-1]["error"]
    assert all(x["done"] is False for x in lines[:-1])
    assert "Hearth: stopping" in server.output()


def test_sigterm_lets_a_short_request_finish(smollm2_path):
    server = live_server("--parallel", "2", "--ctx", "2048", "--shutdown-grace", "120")
    out: dict = {}
    started = threading.Event()

    def run() -> None:
        with httpx.stream("POST", f"{server.url}/api/chat", timeout=120, json={
                "model": "smollm2-135m", "messages": [{"role": "user", "content": "Hi"}],
                "options": {"num_predict": 12, "temperature": 0}}) as r:
            lines = r.iter_lines()
            first = next(lines)
            started.set()
            out["lines"] = [first, *lines]

    t = threading.Thread(target=run)
    t.start()
    assert started.wait(120)
    server.proc.send_signal(signal.SIGTERM)
    t.join(120)
    assert server.proc.wait(60) == 0
    last = json.loads([x for x in out["lines"] if x][-1])
    assert last["done"] is True and last["eval_count"] >= 1
