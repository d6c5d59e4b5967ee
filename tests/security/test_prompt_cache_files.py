"""A prompt-cache file is checked against its real size before anything it says is trusted: a
damaged one costs that file, never the model. A count of 0xFFFFFFF0 block hashes made the
model's worker read 32 GiB at every start: it died with MemoryError, the model answered 500
until the file was removed by hand."""

from __future__ import annotations

import os

import httpx
import pytest

from runtime.server.launcher import ServiceProcess

#: where a prompt-cache file's header keeps its count of block hashes (``disk_cache._HEAD``)
COUNT_AT = 20
SYSTEM = "You are a careful assistant. " * 12  # several full blocks of 16 tokens: a state is saved


def _chat(server: ServiceProcess) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/chat/completions", timeout=300, json={
        "max_tokens": 2, "temperature": 0,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi"}]})


@pytest.mark.timeout(600)
def test_a_prompt_cache_file_with_a_damaged_count_is_dropped_and_the_model_answers(smollm2_path, tmp_path):
    data = tmp_path / "data"
    env = {**os.environ, "HEARTH_DATA_DIR": str(data), "HEARTH_CACHE_DISK": "64"}
    args = ("--parallel", "1", "--ctx", "1024")
    server = ServiceProcess(*args, env=env).wait_ready()
    try:
        assert _chat(server).status_code == 200
    finally:
        server.stop()  # the worker finishes its writes
    files = sorted((data / "prompt-cache").glob("*.kv"))
    assert files, "the first run saved no prompt-cache file"
    for path in files:
        raw = bytearray(path.read_bytes())
        raw[COUNT_AT:COUNT_AT + 4] = (0xFFFFFFF0).to_bytes(4, "little")
        path.write_bytes(bytes(raw))

    server = ServiceProcess(*args, env=env).wait_ready()  # the worker read the folder at its start
    try:
        assert not any(p.exists() for p in files), "a damaged file was kept"
        for _ in range(2):
            r = _chat(server)
            assert r.status_code == 200, r.text
        assert "prompt cache file" in server.output() and "removed" in server.output()
        assert server.stats()["models"][0]["state"] == "running"
    finally:
        server.stop()
