"""``hearth serve`` starts loading the default model while it starts: the hardware probe and a
spare engine worker (its imports done) begin before the API is imported. The service answers
/health throughout, a request that arrives during the preload is served by the same load,
one worker runs, and a spare the preload did not use (an embedding model) is ended. The
hardware probe runs in that spare: one process imports llama.cpp, with the overlap or without.
(The overlap is on by itself from 2 CPUs; ``HEARTH_WARM_START`` turns it on or off here.)"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from runtime.server.launcher import ServiceProcess


def _llama_children(pid: int) -> list[int]:
    out = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "libllama" in Path(f"/proc/{child.pid}/maps").read_text():
                out.append(child.pid)
        except OSError:
            pass
    return out


def _wait_listening(s: ServiceProcess, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert s.proc.poll() is None, s.output()
        try:
            httpx.get(f"{s.url}/health", timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.02)
    raise TimeoutError("the service did not listen")


@pytest.fixture()
def service(request, smollm2_path, minilm_path):
    s = ServiceProcess("--model", request.param, "--ctx", "1024", "--parallel", "2", "--cache-disk", "0",
                       env={**os.environ, "HEARTH_KEEP_ALIVE": "-1", "HEARTH_WARM_START": "1"})
    yield s
    s.stop()


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc")
@pytest.mark.parametrize("service", ["smollm2-135m"], indirect=True)
def test_health_answers_during_the_preload_and_a_first_request_shares_its_load(service):
    _wait_listening(service)
    listening = time.time()
    health: list[tuple[float, dict]] = []
    done = threading.Event()

    def watch():
        with httpx.Client(timeout=5) as c:
            while not done.is_set():
                t = time.monotonic()
                r = c.get(f"{service.url}/health")
                health.append((time.monotonic() - t, r.json()))
                time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        r = httpx.post(f"{service.url}/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 4,
                                                              "temperature": 0}, timeout=180)
    finally:
        done.set()
        watcher.join()
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"]
    assert health and max(t for t, _ in health) < 1.0, [t for t, _ in health]
    workers = _llama_children(service.proc.pid)
    assert workers == [service.health()["engine"]["pid"]]  # the preload's worker served it: one load
    # the worker was spawned before the API listened (as the spare), not after the probe
    assert psutil.Process(workers[0]).create_time() < listening


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc")
@pytest.mark.parametrize("service", ["minilm-l6"], indirect=True)
def test_a_spare_worker_the_preload_did_not_use_is_ended(service):
    _wait_listening(service)
    deadline = time.monotonic() + 60
    while _llama_children(service.proc.pid):  # the spare is ended once the preload gave up
        assert time.monotonic() < deadline, "the spare engine worker is still running"
        time.sleep(0.1)
    r = httpx.post(f"{service.url}/v1/embeddings", json={"model": "minilm-l6", "input": ["hello"]}, timeout=180)
    assert r.status_code == 200, r.text
    assert _llama_children(service.proc.pid) == []


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads /proc")
@pytest.mark.parametrize("warm", ["1", "0"])
def test_one_process_imports_llama_cpp_for_the_probe_and_the_load(warm, smollm2_path):
    s = ServiceProcess("--model", "smollm2-135m", "--ctx", "1024", "--parallel", "2", "--cache-disk", "0",
                       env={**os.environ, "HEARTH_KEEP_ALIVE": "-1", "HEARTH_WARM_START": warm})
    try:
        seen: set[int] = set()
        deadline = time.monotonic() + 120
        while True:  # every process that maps llama.cpp, from the start to the loaded model
            assert s.proc.poll() is None, s.output()
            assert time.monotonic() < deadline, s.output()
            seen.update(_llama_children(s.proc.pid))
            try:
                if s.health()["engine"]["state"] == "running":
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.01)
        r = httpx.post(f"{s.url}/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 2}, timeout=60)
        assert r.status_code == 200, r.text
        assert seen == {s.health()["engine"]["pid"]}, seen  # no probe process of its own
    finally:
        s.stop()
