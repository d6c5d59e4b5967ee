"""Mixture-of-experts models through the engine (tiny generated ``qwen3moe`` and ``gpt-oss``
GGUFs, real llama.cpp): batched generation equals each request alone, a repeated prompt is read
from the prefix cache with the same tokens, and speculative decoding with a small dense draft over
the same vocabulary gives the target's own greedy tokens."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.engine.engine import CacheConfig, Engine
from runtime.engine.speculator import Speculator
from runtime.sampling_params import SamplingParams
from tests.backends.test_llama_backend import greedy
from tests.moe_models import write_tiny_gpt_oss, write_tiny_qwen3moe
from tests.spec.tiny_models import write_tiny

CFG = ContextConfig(n_ctx=1024, n_seq_max=8, n_batch=64, n_threads=1)
N = 12


@pytest.fixture(scope="module", params=["qwen3moe", "gpt-oss"])
def target(request, tmp_path_factory):
    write = write_tiny_qwen3moe if request.param == "qwen3moe" else write_tiny_gpt_oss
    b = LlamaBackend(write(tmp_path_factory.mktemp("moe") / f"tiny-{request.param}.gguf"), CFG)
    b.arch = request.param
    yield b
    b.close()


@pytest.fixture(scope="module")
def draft(tmp_path_factory):
    b = LlamaBackend(write_tiny(tmp_path_factory.mktemp("draft") / "dense-draft.gguf", seed=3), CFG)
    yield b
    b.close()


def prompts(n: int = 6) -> list[list[int]]:
    rng = np.random.default_rng(7)
    shared = rng.integers(3, 64, size=40).tolist()  # three full blocks every prompt shares
    return [shared + rng.integers(3, 64, size=int(rng.integers(4, 20))).tolist() for _ in range(n)]


def run(engine: Engine, ps: list[list[int]]) -> tuple[dict[str, list[int]], dict[str, int]]:
    params = SamplingParams(temperature=0, max_tokens=N, ignore_eos=True)
    reqs = {f"r{i}": engine.add_request(f"r{i}", p, params) for i, p in enumerate(ps)}
    cached: dict[str, int] = {}
    while engine.has_work():
        for o in engine.step():
            cached[o.request_id] = max(cached.get(o.request_id, 0), o.cached_tokens)
    return {rid: r.tokens[r.prompt_len:] for rid, r in reqs.items()}, cached


@pytest.mark.parametrize("parallel", [1, 4])
def test_moe_generation_in_the_engine_equals_each_request_alone(target, parallel):
    ps = prompts()
    target.clear()
    alone = {f"r{i}": greedy(target, p, N) for i, p in enumerate(ps)}
    target.clear()
    got, _ = run(Engine(target, parallel), ps)
    if parallel > 1 and target.arch == "gpt-oss" and got != alone:
        # llama.cpp's own: several gpt-oss prompts in one llama_decode give logits 0.5-1.7 away from
        # the same prompt decoded alone (qwen3moe's match exactly); Hearth batches as llama-server does
        pytest.xfail("gpt-oss prompts batched together in llama.cpp differ from each alone")
    assert got == alone


def test_a_repeated_moe_prompt_is_read_from_the_prefix_cache(target):
    ps = prompts()
    target.clear()
    engine = Engine(target, 4, CacheConfig(cache_fraction=1.0, host_mib=0))
    first, _ = run(engine, ps[:1])
    again, cached = run(engine, ps[:1])
    assert again == first and cached["r0"] >= 32  # the shared blocks (a checkpoint's for gpt-oss's window)
    others, cached = run(engine, ps[1:3])
    assert all(c >= 32 for c in cached.values()), cached


def test_speculative_decoding_on_a_moe_target_gives_its_own_greedy_tokens(target, draft):
    ps = prompts()
    target.clear()
    ref, _ = run(Engine(target, 4), ps)
    target.clear()
    draft.clear()
    spec = Speculator(target, draft, fixed_k=4)
    got, _ = run(Engine(target, 4, speculator=spec), ps)
    assert got == ref
    assert spec.stats.drafted > 20
