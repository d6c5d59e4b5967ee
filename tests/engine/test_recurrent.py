"""Recurrent memory through the engine (a tiny Mamba, and a tiny Jamba hybrid of Mamba and
attention layers, written here): state slots, checkpoints, batching, preemption."""

from __future__ import annotations

import pytest

from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.engine.checkpoints import memory_layout, speculation_refusal
from runtime.engine.engine import CacheConfig, Engine
from runtime.sampling_params import SamplingParams
from tests.engine.tiny_recurrent import write_tiny_jamba, write_tiny_mamba

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


@pytest.fixture(scope="module", params=["mamba", "jamba"])
def mamba_path(request, tmp_path_factory):
    write = write_tiny_mamba if request.param == "mamba" else write_tiny_jamba
    return write(tmp_path_factory.mktemp(request.param) / f"{request.param}.gguf")


def make(path, parallel=3, n_ctx=1024, prefix_cache=True, host_mib=64) -> Engine:
    b = LlamaBackend(path, ContextConfig(n_ctx=n_ctx, n_seq_max=parallel + 2, n_batch=64))
    return Engine(b, parallel, CacheConfig(16, prefix_cache, 0.0, host_mib))


def prompt(seed: int, n: int) -> list[int]:
    return [3 + (seed * 13 + i * 7 + i * i) % 61 for i in range(n)]


def run(engine: Engine, prompts: dict[str, list[int]], params=GREEDY) -> dict[str, tuple[list[int], int]]:
    """Submit all at once, step to the end: each request's output tokens and cached tokens."""
    reqs = {rid: engine.add_request(rid, p, params) for rid, p in prompts.items()}
    while engine.has_work():
        engine.step()
    return {rid: (r.tokens[r.prompt_len:], r.cached_tokens) for rid, r in reqs.items()}


@pytest.fixture(scope="module")
def plain(mamba_path):
    """The reference: no prefix cache, one request at a time."""
    e = make(mamba_path, parallel=1, prefix_cache=False)
    yield e
    e.backend.close()


def alone(plain: Engine, p: list[int]) -> list[int]:
    return run(plain, {"ref": p})["ref"][0]


def test_the_architecture_is_read_from_the_gguf(mamba_path, plain):
    info = plain.backend.info
    hybrid = mamba_path.stem == "jamba"
    assert info.recurrent is not hybrid and info.hybrid is hybrid
    layout = memory_layout(info)
    assert layout.kind == ("hybrid" if hybrid else "recurrent") and layout.partial and not layout.holders
    assert layout.cells is hybrid  # a hybrid's attention layers have per-token cells
    assert layout.kind in speculation_refusal(info)
    assert plain.stats().kv.memory == layout.kind


def test_greedy_decoding_is_deterministic(plain):
    p = prompt(1, 40)
    first, second = alone(plain, p), alone(plain, p)
    assert first == second and len(first) == 12
    assert alone(plain, prompt(2, 40)) != first  # the output depends on the prompt


def test_a_batch_of_sequences_decodes_as_each_one_alone(mamba_path, plain):
    prompts = {f"r{i}": prompt(i, 20 + 9 * i) for i in range(3)}
    e = make(mamba_path, prefix_cache=False)
    try:
        together = run(e, prompts)
    finally:
        e.backend.close()
    for rid, p in prompts.items():
        assert together[rid][0] == alone(plain, p), rid


def test_a_longer_prompt_resumes_from_the_checkpoint_of_an_earlier_one(mamba_path, plain):
    e = make(mamba_path)
    try:
        first = prompt(3, 100)
        run(e, {"a": first})
        second = first + prompt(4, 21)
        out, cached = run(e, {"b": second})["b"]
        # the checkpoint at the first prompt's last block boundary before its last token
        assert cached == (len(first) - 1) // 16 * 16 == 96
        assert out == alone(plain, second)
        kv = e.stats().kv
        assert kv.checkpoints_restored == 1 and kv.holders == 0 and kv.blocks_cached == 0
        # a prompt that shares only the first 50 tokens finds no checkpoint below it
        other = first[:50] + prompt(5, 30)
        assert run(e, {"c": other})["c"][1] == 0
    finally:
        e.backend.close()


def test_a_long_prompt_keeps_a_checkpoint_every_n_blocks(mamba_path, plain):
    b = LlamaBackend(mamba_path, ContextConfig(n_ctx=1024, n_seq_max=3, n_batch=64))
    e = Engine(b, 1, CacheConfig(16, True, 0.0, 64, checkpoint_blocks=2))
    try:
        long = prompt(6, 150)
        run(e, {"a": long})
        assert e.stats().kv.checkpoints == 150 // 32 + 1  # every 32 tokens, and at 144
        branch = long[:70] + prompt(7, 10)  # diverges inside the third 32-token span
        out, cached = run(e, {"b": branch})["b"]
        assert cached == 64 and out == alone(plain, branch)
    finally:
        b.close()


def test_requests_preempted_for_lack_of_room_finish_with_the_same_output(mamba_path, plain):
    # 256 tokens of context for three requests that grow to 100 each: someone is preempted
    e = make(mamba_path, parallel=3, n_ctx=256)
    params = SamplingParams(temperature=0, max_tokens=60, ignore_eos=True)
    prompts = {f"p{i}": prompt(10 + i, 40) for i in range(3)}
    try:
        done = run(e, prompts, params)
        assert e.stats().preemptions > 0
    finally:
        e.backend.close()
    for rid, p in prompts.items():
        ref = run(plain, {"ref": p}, params)["ref"][0]
        assert done[rid][0] == ref, rid


def test_speculative_decoding_is_refused_with_the_reason(plain):
    from runtime.backends.errors import ModelLoadError
    from runtime.engine.worker import load_speculator

    with pytest.raises(ModelLoadError, match="cannot be trimmed"):
        load_speculator(plain.backend, "ngram", ContextConfig(n_ctx=1024, n_seq_max=3, n_batch=64))
