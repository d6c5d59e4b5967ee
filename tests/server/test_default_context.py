"""With no ``--ctx``, each model gets the context its fit plan chooses: the trained context up to
32768 where memory holds it. A coding agent's prompt (tens of thousands of tokens of instructions
and tools) fits by default; the old fixed 8192 refused it on the first request."""

from __future__ import annotations

import httpx
import pytest

from runtime.server.launcher import ServiceProcess


@pytest.fixture(scope="module")
def server(gemma_path, smollm2_path):
    s = ServiceProcess("--model", str(gemma_path), "--parallel", "1").wait_ready()
    yield s
    s.stop()


def _loaded_ctx(server, model: str) -> int:
    ps = httpx.get(f"{server.url}/api/ps", timeout=10).json()["models"]
    return next(m["context_length"] for m in ps if model in (m["name"], m["model"]))


@pytest.mark.timeout(600)
def test_a_prompt_past_the_old_default_fits_by_default(server, gemma_path):
    model = server.health()["engine"]["model"]
    assert _loaded_ctx(server, model) == 32768  # Gemma 3 270M's trained context, and it fits here
    # ~9k tokens: past the 8192 that every model was loaded with before
    prompt = "The quick brown fox jumps over the lazy dog. " * 900
    r = httpx.post(f"{server.url}/v1/chat/completions", timeout=300, json={
        "model": model, "max_tokens": 2, "messages": [{"role": "user", "content": prompt}]})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] > 8192


def test_a_model_trained_shorter_gets_its_trained_context(server):
    r = httpx.post(f"{server.url}/api/show", json={"model": "smollm2-135m"}, timeout=30)
    assert r.status_code == 200, r.text
    params = dict(line.split(None, 1) for line in r.json()["parameters"].splitlines())
    assert params["num_ctx"] == "8192"  # not loaded: the context a load would plan (its trained one)
