"""The service process never loads llama.cpp: engines run in worker processes (read from the
service's memory map after it has served requests; Linux only)."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/maps")


def _mapped(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def test_the_service_maps_no_libllama_after_serving(server):
    r = httpx.post(f"{server.url}/v1/chat/completions", timeout=120, json={
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "temperature": 0})
    assert r.status_code == 200
    for path in ("/v1/models", "/api/tags", "/hearth/stats", "/hearth/fit?model=smollm2-135m"):
        assert httpx.get(f"{server.url}{path}", timeout=120).status_code == 200, path
    worker = server.health()["engine"]["pid"]
    assert worker is not None and worker != server.proc.pid
    assert "libllama" in _mapped(worker)  # the check can see the library where it is loaded
    assert "libllama" not in _mapped(server.proc.pid)
