"""A worker killed mid-stream: errors, not hangs; /health says so; the next request works."""

from __future__ import annotations

import os
import signal
import threading
import time

import httpx
import pytest

from tests.server.conftest import live_server


@pytest.fixture(scope="module")
def crash_server(smollm2_path):
    s = live_server("--parallel", "2", "--ctx", "2048")
    yield s
    s.stop()


def test_killed_worker_fails_streams_quickly_and_restarts(crash_server):
    s = crash_server
    pid = s.stats()["models"][0]["pid"]
    body = {"prompt": "Tell me a story.", "max_tokens": 1500, "stream": True, "ignore_eos": True}
    events: list[str] = []
    done_at: list[float] = []

    def stream() -> None:
        with httpx.stream("POST", f"{s.url}/v1/completions", json=body, timeout=30) as r:
            for line in r.iter_lines():
                if line:
                    events.append(line)
        done_at.append(time.monotonic())

    t = threading.Thread(target=stream)
    t.start()
    while len(events) < 5:
        time.sleep(0.01)
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    t.join(10)
    assert done_at and done_at[0] - killed_at < 1.0
    assert '"engine_stopped"' in events[-2] and events[-1] == "data: [DONE]"
    health = s.health()["engine"]
    assert health["state"] == "crashed" and "exit code -9" in health["error"]

    r = httpx.post(f"{s.url}/v1/completions", json={"prompt": "Hi", "max_tokens": 4}, timeout=60)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
    assert s.stats()["models"][0]["pid"] != pid
    assert s.health()["engine"]["state"] == "running"


def test_non_streaming_request_gets_503_when_worker_dies(crash_server):
    s = crash_server
    pid = s.stats()["models"][0]["pid"]
    result: list[httpx.Response] = []
    t = threading.Thread(target=lambda: result.append(httpx.post(
        f"{s.url}/v1/completions", json={"prompt": "Story:", "max_tokens": 1500, "ignore_eos": True}, timeout=30)))
    t.start()
    deadline = time.monotonic() + 10
    while s.stats()["models"][0].get("running", 0) == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    t.join(5)
    assert result and result[0].status_code == 503
    assert result[0].json()["error"]["code"] == "engine_stopped"


def test_sigterm_stops_the_service_and_its_worker(smollm2_path):
    import psutil

    s = live_server("--parallel", "1", "--ctx", "1024")
    worker = psutil.Process(s.stats()["models"][0]["pid"])
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(20) == 0
    worker.wait(5)
    assert not worker.is_running()
