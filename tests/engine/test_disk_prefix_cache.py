"""The prompt cache on disk with the real models: a new worker restores an agent's prefix.

An agent re-sends the same long prefix (tools, instructions) with every request. A worker
computes it once; after that worker is gone (a restart, a model switch, an unload by
keep-alive), a new worker for the same model file reads the saved state back from the disk
tier instead of computing it again, and answers as a cold prefill would.
"""

from __future__ import annotations

import time
from importlib.metadata import version

import pytest

from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.engine.disk_cache import DiskCache, layout_key, model_identity
from runtime.engine.engine import CacheConfig, Engine
from runtime.sampling_params import SamplingParams

TOOLS = "".join(
    f"Tool {i}: read_file_{i}(path: string, offset: integer = 0, limit: integer = {100 + i}) returns the "
    f"lines of the file at path, numbered from offset + 1. Use it before editing file number {i}; never "
    f"guess a file's contents. Errors: not_found, too_large_{i}, permission_denied.\n"
    for i in range(26))
N_CTX = 4096


def _engine(path, folder) -> tuple[Engine, DiskCache]:
    """A fresh worker's engine: its own context, an empty host tier, the shared disk folder."""
    backend = LlamaBackend(path, ContextConfig(n_ctx=N_CTX, n_seq_max=4, n_batch=512))
    key = layout_key(model_identity(path), 16, "f16", None, f"llama-cpp-python {version('llama_cpp_python')}")
    disk = DiskCache(folder, 1 << 30, key)
    return Engine(backend, 2, CacheConfig(16, True, 0.0, host_mib=1024), disk=disk), disk


def _run(engine: Engine, rid: str, prompt: list[int], n: int) -> tuple[list, int, float]:
    """Greedy tokens with their top-2 logprobs, cached prompt tokens, seconds to the first token."""
    t0 = time.perf_counter()
    req = engine.add_request(rid, prompt, SamplingParams(temperature=0, max_tokens=n, logprobs=True,
                                                         top_logprobs=2))
    entries, ttft = [], None
    while engine.has_work():
        for o in engine.step():
            entries += o.logprobs or []
            if ttft is None and o.n_tokens:
                ttft = time.perf_counter() - t0
    return entries, req.cached_tokens, ttft


def assert_same_or_near_tie(got: list, cold: list, tol: float) -> None:
    """The same greedy tokens, or a first difference where the cold run's best two were
    within ``tol`` (a cache hit changes how the prompt is split into batches)."""
    for a, b in zip(got, cold):
        if a.token != b.token:
            gap = b.top[0][2] - b.top[1][2]
            assert gap < tol, f"left the cold run's answer at a confident token (gap {gap:.3f})"
            return
    assert len(got) == len(cold)


@pytest.mark.timeout(900)  # a cold prefill of 2,000 tokens: minutes on a loaded 2-core machine
@pytest.mark.parametrize("model", ["smollm2", "gemma"])
def test_a_new_worker_restores_the_shared_prefix_from_disk(model, smollm2_path, gemma_path, tmp_path):
    path = smollm2_path if model == "smollm2" else gemma_path
    folder = tmp_path / "prompt-cache"
    engine, disk = _engine(path, folder)
    try:
        prefix = engine.backend.tokenize(TOOLS)
        prompt = prefix + engine.backend.tokenize("\nUser: which tool reads file 7?\nAssistant:", add_special=False)
        cold, cached, cold_s = _run(engine, "a", prompt, 6)
    finally:
        engine.backend.close()
        disk.close()  # the worker ends: its writes are done, its memory is gone
    assert len(prefix) > 2000 and cached == 0

    engine, disk = _engine(path, folder)
    try:
        got, cached, warm_s = _run(engine, "b", prompt, 6)
        kv = engine.stats().kv
    finally:
        engine.backend.close()
        disk.close()
    print(f"{model}: {len(prompt)}-token prompt, first token {cold_s:.2f} s cold, {warm_s:.2f} s with "
          f"{cached} tokens from disk")
    assert cached >= 0.9 * len(prefix), (cached, len(prefix))
    assert warm_s < cold_s / 4, (warm_s, cold_s)
    assert kv.disk_tier.states.hits == 1 and kv.disk_tier.states.hit_tokens == cached
    assert kv.host_tier.states.misses == 1 and kv.host_tier.states.hits == 0
    if model == "gemma":  # the sliding window comes back through a checkpoint on disk
        assert kv.checkpoints_restored == 1 and kv.disk_tier.checkpoints.hits == 1
    # the restored prefix answers as the cold prefill did
    assert_same_or_near_tie(got, cold, tol=1.5 if model == "gemma" else 0.5)


def _chat(server, model: str, system: str, question: str) -> dict:
    import httpx

    body = {"model": model, "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}
    r = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()["usage"]


@pytest.mark.timeout(900)
def test_the_service_restores_an_agents_prefix_after_a_model_switch_and_a_restart(smollm2_path, gemma_path,
                                                                                    data_dir):
    """One resident model at a time: a request for Gemma unloads SmolLM2, and the next SmolLM2
    request finds the prefix on disk; so does the first request after a restart."""
    import os
    import shutil

    from runtime.server.launcher import ServiceProcess

    shutil.rmtree(data_dir / "prompt-cache", ignore_errors=True)
    env = dict(os.environ, HEARTH_CACHE_DISK="1024")
    args = ("--model", "smollm2-135m", "--max-models", "1", "--parallel", "1", "--ctx", str(N_CTX))
    ref = LlamaBackend(smollm2_path, ContextConfig(n_ctx=256, n_seq_max=1, n_batch=64))
    try:
        a, b = (ref.chat_prompt([{"role": "system", "content": TOOLS}, {"role": "user", "content": q}])
                for q in ("Which tool reads file 3?", "Which tool reads file 9?"))
    finally:
        ref.close()
    shared = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    server = ServiceProcess(*args, env=env).wait_ready()
    try:
        assert _chat(server, "smollm2-135m", TOOLS, "Which tool reads file 3?")["prompt_tokens_details"][
            "cached_tokens"] == 0
        _chat(server, "gemma-3-270m", "Be brief.", "Hi")  # SmolLM2's worker ends
        switched = _chat(server, "smollm2-135m", TOOLS, "Which tool reads file 9?")
    finally:
        server.stop()
    server = ServiceProcess(*args, env=env).wait_ready()
    try:
        restarted = _chat(server, "smollm2-135m", TOOLS, "Which tool reads file 5?")
        kv = server.stats()["models"][0]["kv"]
    finally:
        server.stop()
    assert shared > 2000
    for usage in (switched, restarted):
        assert usage["prompt_tokens_details"]["cached_tokens"] >= 0.9 * shared, (usage, shared)
    disk = kv["disk_tier"]
    assert disk["states"]["hits"] == 1 and disk["states"]["entries"] >= 1 and disk["capacity_bytes"] > 0
    assert kv["host_tier"]["states"]["misses"] == 1 and kv["host_tier"]["hit_rate"] == 0.0
