"""Logprobs in the engine (tiny models): sampled, verified under a draft, and over the prompt.

The reference is llama-cpp-python's own forward pass over the same tokens (``logits_all``):
whatever path produced a token (plain decode, an accepted draft, the target's correction,
a chunked prompt), its logprob must be the target's softmax at that position.
"""

from __future__ import annotations

import numpy as np
import pytest

from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.engine.engine import Engine
from runtime.sampling_params import SamplingParams
from runtime.engine.speculator import Speculator
from runtime.kernels.logprobs import MAX_TOP, row_logprobs, sequence_logprobs, top_n

CFG = ContextConfig(n_ctx=1024, n_seq_max=8, n_batch=128, n_threads=1)


@pytest.fixture(scope="module")
def backends(tiny):
    out = {name: LlamaBackend(tiny[name], CFG) for name in ("target", "close")}
    yield out
    for b in out.values():
        b.close()


@pytest.fixture(scope="module")
def reference(tiny):
    """``reference(tokens)`` -> float64 [len(tokens) - 1]: logprob of token i+1 after tokens[:i+1]."""
    import llama_cpp

    llm = llama_cpp.Llama(str(tiny["target"]), n_ctx=1024, n_batch=128, logits_all=True, flash_attn=True,
                          verbose=False, n_threads=1)

    def run(tokens: list[int]) -> np.ndarray:
        llm.reset()
        llm.eval(tokens)
        rows = np.array(llm.scores[:len(tokens) - 1])
        return sequence_logprobs(rows, np.array(tokens[1:]))

    yield run
    llm.close()


def drive(engine: Engine, requests: list[tuple[str, list[int], SamplingParams]]) -> dict:
    reqs = {rid: engine.add_request(rid, prompt, params) for rid, prompt, params in requests}
    got = {rid: {"prompt": [], "gen": [], "cached": 0} for rid in reqs}
    while engine.has_work():
        for o in engine.step():
            got[o.request_id]["prompt"] += o.prompt_logprobs or []
            got[o.request_id]["gen"] += o.logprobs or []
            if o.finish_reason is not None:
                got[o.request_id]["cached"] = o.cached_tokens
    for rid, r in reqs.items():
        got[rid]["tokens"] = r.tokens
    return got


def prompt(n: int, seed: int) -> list[int]:
    return np.random.default_rng(seed).integers(3, 64, size=n).tolist()


def test_kernel_matches_a_direct_log_softmax():
    rng = np.random.default_rng(0)
    row = (rng.normal(size=5000) * 4).astype(np.float32)
    row[[7, 9]] = row.max() + 1  # a tie at the top: the lower id first
    want = row.astype(np.float64) - np.log(np.exp(row.astype(np.float64)).sum())
    r = row_logprobs(row, 123, 6)
    assert abs(r.logprob - want[123]) < 1e-12
    assert list(r.top_ids[:2]) == [7, 9] and list(r.top_ids) == list(np.argsort(-want, kind="stable")[:6])
    assert np.allclose(r.top_logprobs, want[r.top_ids], atol=1e-12)
    assert np.isclose(np.exp(sequence_logprobs(np.tile(row, (3, 1)), np.arange(3))).sum(), np.exp(want[:3]).sum())
    assert top_n(row, 0).size == 0 and top_n(row[:3], 10).size == 3
    with pytest.raises(ValueError):
        row_logprobs(row, 0, MAX_TOP + 1)


def test_prompt_logprobs_over_chunks_skip_the_prefix_cache(backends, reference):
    target = backends["target"]
    target.clear()
    engine = Engine(target, 4)
    engine.scheduler.config.max_output_rows = 7  # a 50-token prompt in 8 steps
    p = prompt(50, 1)
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logprobs=True, top_logprobs=3,
                            prompt_logprobs=True)
    warm = drive(engine, [("warm", p, SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))])
    assert warm["warm"]["prompt"] == []
    got = drive(engine, [("a", p, params)])["a"]
    assert got["cached"] == 0  # the cache held this prompt, but its positions must be computed
    assert [e.token for e in got["prompt"]] == p and got["prompt"][0].logprob is None
    ref = reference(got["tokens"])
    mine = [e.logprob for e in got["prompt"][1:]] + [e.logprob for e in got["gen"]]
    assert np.allclose(mine, ref, atol=1e-4)
    assert all(len(e.top) == 3 and e.top[0][2] >= e.top[1][2] >= e.top[2][2] for e in got["prompt"][1:])
    # a request without prompt logprobs still hits the cache for the same prompt
    again = drive(engine, [("b", p, SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))])["b"]
    assert again["cached"] > 0


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_logprobs_under_a_draft_are_the_targets(backends, reference, temperature):
    """Each request alone (other sequences in the batch move llama.cpp's numerics by ~1e-3,
    docs/architecture.md), so the target's rows match the reference's to rounding."""
    target, draft = backends["target"], backends["close"]
    reqs = [(f"r{i}", prompt(8 + 5 * i, 10 + i), SamplingParams(temperature=temperature, seed=i, max_tokens=30,
                                                                 ignore_eos=True, logprobs=True, top_logprobs=2))
            for i in range(3)]
    reqs.append(("echo", prompt(20, 42), SamplingParams(temperature=temperature, seed=9, max_tokens=20,
                                                        ignore_eos=True, logprobs=True, top_logprobs=1,
                                                        prompt_logprobs=True)))
    drafted = accepted = 0
    for rid, p, params in reqs:
        target.clear()
        draft.clear()
        spec = Speculator(target, draft, fixed_k=4)
        g = drive(Engine(target, 4, speculator=spec), [(rid, p, params)])[rid]
        drafted, accepted = drafted + spec.stats.drafted, accepted + spec.stats.accepted
        n_prompt = len(p)
        assert [e.token for e in g["gen"]] == g["tokens"][n_prompt:]
        ref = reference(g["tokens"])
        assert np.allclose([e.logprob for e in g["gen"]], ref[n_prompt - 1:], atol=1e-4), rid
        if rid == "echo":
            assert np.allclose([e.logprob for e in g["prompt"][1:]], ref[:n_prompt - 1], atol=1e-4)
        if temperature == 0:  # greedy: the emitted token is the target's most likely
            assert all(e.top[0][0] == e.token for e in g["gen"])
    assert 0 < accepted < drafted  # accepted drafts and the target's corrections both happened


def test_n_completions_share_the_prompt_and_its_logprobs(backends):
    target = backends["target"]
    target.clear()
    engine = Engine(target, 4)
    params = SamplingParams(temperature=1.0, seed=5, max_tokens=5, ignore_eos=True, logprobs=True,
                            prompt_logprobs=True)
    group = engine.add_group("g", prompt(40, 3), params, 3)
    got = {r.request_id: [] for r in group}
    while engine.has_work():
        for o in engine.step():
            got[o.request_id] += o.prompt_logprobs or []
    assert len(got["g"]) == 40 and got["g/1"] == [] and got["g/2"] == []
    assert engine.kv.prefix_hit_tokens > 0  # the other completions took the prompt from the cache
