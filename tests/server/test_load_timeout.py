"""A model load that takes longer than ``--load-timeout`` ends with a clear 504, and its
worker is killed (no engine process is left behind), while the service keeps answering."""

from __future__ import annotations

import time

import httpx
import psutil

from runtime.server.launcher import ServiceProcess


def _workers(pid: int) -> list[psutil.Process]:
    out = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.is_running() and child.status() != psutil.STATUS_ZOMBIE and \
                    "resource_tracker" not in " ".join(child.cmdline()):
                out.append(child)
        except psutil.Error:
            continue
    return out


def test_a_load_past_the_timeout_is_stopped_with_a_clear_error(smollm2_path):
    s = ServiceProcess("--parallel", "1", "--ctx", "1024", "--load-timeout", "0.05")
    try:
        deadline = time.monotonic() + 120
        while True:  # the preload times out too: the service answers, no engine runs
            try:
                health = s.health()
                if health["engine"]["error"]:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the service never reported the failed preload"
            time.sleep(0.1)
        r = httpx.post(f"{s.url}/v1/chat/completions", timeout=60, json={
            "model": "smollm2-135m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        err = r.json()["error"]
        assert r.status_code == 504 and err["code"] == "model_load_timeout", r.text
        assert "--load-timeout" in err["message"]
        time.sleep(0.5)
        assert _workers(s.proc.pid) == []  # the worker was killed, not left loading
        assert s.health()["engine"]["state"] != "running"
    finally:
        s.stop()
