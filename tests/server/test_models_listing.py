"""``/v1/models`` on a fresh data directory: the embedded models are listed before their files are
placed (the first use places them), with the capabilities and context the catalog states, so a
chat can pick one; once placed, the file's own reading agrees."""

from __future__ import annotations

import os

import httpx

from runtime.server.generate.capabilities import capabilities
from runtime.server.launcher import ServiceProcess


def test_embedded_models_are_listed_with_capabilities_before_their_first_use(tmp_path):
    data = tmp_path / "data"
    s = ServiceProcess("--parallel", "1", env={**os.environ, "HEARTH_DATA_DIR": str(data)}).wait_ready()
    try:
        listed = {m["id"]: m for m in httpx.get(f"{s.url}/v1/models").json()["data"]}
        assert not (data / "models" / "gemma-3-270m.gguf").exists()  # not placed: only the default model is
        assert listed["gemma-3-270m"]["capabilities"] == ["completion"]  # a base model: completions, plain chat
        assert listed["gemma-3-270m"]["context_length"] == 32768
        assert listed["minilm-l6"]["capabilities"] == ["embedding"]
        r = httpx.post(f"{s.url}/v1/completions", json={"model": "gemma-3-270m", "prompt": "The sky is", "max_tokens": 2},
                       timeout=300)
        assert r.status_code == 200, r.text
        placed = data / "models" / "gemma-3-270m.gguf"
        assert placed.exists()
        assert capabilities(placed) == listed["gemma-3-270m"]["capabilities"]
        after = {m["id"]: m for m in httpx.get(f"{s.url}/v1/models").json()["data"]}["gemma-3-270m"]
        assert after["capabilities"] == ["completion"] and after["loaded"]
    finally:
        s.stop()
