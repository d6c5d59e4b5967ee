"""Speculative decoding in the engine, end to end on real llama.cpp contexts (tiny models)."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.backends.errors import ModelLoadError
from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.engine.engine import Engine, RequestRejected
from runtime.sampling_params import SamplingParams
from runtime.engine.speculator import Speculator
from runtime.engine.worker import load_speculator
from runtime.kernels.speculative import candidates

CFG = ContextConfig(n_ctx=1024, n_seq_max=8, n_batch=128, n_threads=1)


@pytest.fixture(scope="module")
def backends(tiny):
    out = {name: LlamaBackend(path, CFG) for name, path in tiny.items() if name != "foreign"}
    yield out
    for b in out.values():
        b.close()


def fresh(*bs):
    for b in bs:
        b.clear()


def run(engine, requests):
    """Submit ``(id, prompt, params)`` and step to the end: {id: (tokens, text, finish)}."""
    reqs = {rid: engine.add_request(rid, prompt, params) for rid, prompt, params in requests}
    texts = {rid: "" for rid in reqs}
    finish = {}
    for _ in range(100_000):
        if not engine.has_work():
            break
        for o in engine.step():
            texts[o.request_id] += o.text
            if o.finish_reason:
                finish[o.request_id] = o.finish_reason
    return {rid: (r.tokens[r.prompt_len:], texts[rid], finish.get(rid)) for rid, r in reqs.items()}


def prompts(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, 64, size=int(rng.integers(3, 40))).tolist() for _ in range(n)]


def greedy_requests(n=16, stop=True):
    out = []
    for i, p in enumerate(prompts(n)):
        params = SamplingParams(temperature=0, max_tokens=5 + 3 * i, ignore_eos=True,
                                stop=["t1"] if stop and i % 3 == 0 else [])
        out.append((f"r{i}", p, params))
    return out


def baseline(backends, requests, parallel=4):
    fresh(backends["target"])
    return run(Engine(backends["target"], parallel), requests)


@pytest.mark.parametrize("draft", ["close", "other", "contrary"])
def test_greedy_with_a_draft_model_is_identical_to_the_target_alone(backends, draft):
    reqs = greedy_requests()
    ref = baseline(backends, reqs)
    fresh(backends["target"], backends[draft])
    spec = Speculator(backends["target"], backends[draft], fixed_k=4)
    got = run(Engine(backends["target"], 4, speculator=spec), reqs)
    assert got == ref
    assert any(f == "stop" for _, _, f in got.values()) and any(f == "length" for _, _, f in got.values())
    s = spec.stats
    assert s.drafted > 100
    if draft == "contrary":
        assert s.accepted == 0  # a draft that always disagrees: every token from the target
    elif draft == "close":
        assert 0.3 < s.acceptance_rate < 1.0  # both outcomes of verification happen


def test_prompt_lookup_greedy_is_identical(backends):
    reqs = greedy_requests(12, stop=False)
    ref = baseline(backends, reqs)
    fresh(backends["target"])
    spec = Speculator(backends["target"], None, default="ngram", fixed_k=5)
    got = run(Engine(backends["target"], 4, speculator=spec), reqs)
    assert got == ref
    assert spec.stats.drafted > 50 and spec.stats.accepted > 0


def test_mixed_modes_and_prefill_in_one_step(backends):
    """Drafting requests, non-drafting ones and new prompts share steps; all stay exact."""
    reqs = greedy_requests(12)
    modes = ["model", "off", "ngram"]
    mixed = [(rid, p, SamplingParams(**{**{f: getattr(params, f) for f in params.__slots__},
                                        "draft": modes[i % 3]}))
             for i, (rid, p, params) in enumerate(reqs)]
    ref = baseline(backends, reqs, parallel=3)
    fresh(backends["target"], backends["close"])
    spec = Speculator(backends["target"], backends["close"], fixed_k=3)
    got = run(Engine(backends["target"], 3, speculator=spec), mixed)
    assert got == ref


def test_preemption_and_prefix_cache_hits_keep_the_draft_in_step(backends):
    """A small KV pool forces preemption; repeated prompts hit the prefix cache (seq_cp is
    mirrored into the draft). The output stays the target's."""
    rng = np.random.default_rng(3)
    base = [rng.integers(3, 64, size=40).tolist() for _ in range(3)]
    reqs = [(f"p{i}", base[i % 3], SamplingParams(temperature=0, max_tokens=100, ignore_eos=True))
            for i in range(9)]
    ref = baseline(backends, reqs)
    small = ContextConfig(n_ctx=320, n_seq_max=8, n_batch=128, n_threads=1)
    target, draft = LlamaBackend(backends["target"].info.path, small), LlamaBackend(backends["close"].info.path, small)
    try:
        spec = Speculator(target, draft, fixed_k=4)
        engine = Engine(target, 4, speculator=spec)
        got = run(engine, reqs)
        assert got == ref
        assert engine.scheduler.num_preemptions > 0
        assert engine.kv.prefix_hit_tokens > 0
        assert spec.stats.accepted > 0
    finally:
        target.close()
        draft.close()


def test_adaptive_k_turns_a_useless_draft_off(backends):
    reqs = [(f"a{i}", p, SamplingParams(temperature=0, max_tokens=80, ignore_eos=True))
            for i, p in enumerate(prompts(2, seed=9))]
    ref = baseline(backends, reqs, parallel=2)
    fresh(backends["target"], backends["contrary"])
    spec = Speculator(backends["target"], backends["contrary"])
    got = run(Engine(backends["target"], 2, speculator=spec), reqs)
    assert got == ref
    # with fixed K=4 this would draft about 4 per output token; adaptive stops drafting
    assert spec.stats.drafted < 0.5 * 160
    assert spec.stats.requests_off >= 1 or spec.stats.drafted < 40


def _exact_marginals(backend, prompt, params, depth):
    """The target's exact distributions of output tokens 1..depth (marginals), from its logits."""
    marg = [dict() for _ in range(depth)]

    def walk(prefix, prob, level):
        backend.clear()
        backend.batch.clear()
        i = backend.batch.add(prefix, 0, 0, True)
        backend.decode(backend.batch)
        c = candidates(backend.logits(i).copy(), params, prefix)
        for t, p in zip(c.ids.tolist(), c.probs.tolist()):
            marg[level][t] = marg[level].get(t, 0.0) + prob * p
            if level + 1 < depth:
                walk(prefix + [t], prob * p, level + 1)

    walk(list(prompt), 1.0, 0)
    backend.clear()
    return marg


def _tv(samples, exact):
    n = len(samples)
    counts = {}
    for t in samples:
        counts[t] = counts.get(t, 0) + 1
    keys = set(counts) | set(exact)
    return 0.5 * sum(abs(counts.get(k, 0) / n - exact.get(k, 0.0)) for k in keys)


@pytest.mark.parametrize("draft", ["other", "ngram"])
def test_sampling_matches_the_targets_distribution(backends, draft):
    prompt = list(range(3, 64)) + [5, 9]  # every token occurs: prompt lookup always proposes
    params = SamplingParams(temperature=0.9, top_k=5, top_p=0.97, min_p=0.02, max_tokens=4, ignore_eos=True)
    exact = _exact_marginals(backends["target"], prompt, params, 3)
    n = 2500
    reqs = [(f"s{i}", prompt, SamplingParams(**{**{f: getattr(params, f) for f in params.__slots__}, "seed": i}))
            for i in range(n)]
    fresh(backends["target"], backends["other"])
    if draft == "ngram":
        spec = Speculator(backends["target"], None, default="ngram", fixed_k=3)
    else:
        spec = Speculator(backends["target"], backends["other"], fixed_k=3)
    got = run(Engine(backends["target"], 8, speculator=spec), reqs)
    assert spec.stats.drafted > n and 0 < spec.stats.accepted < spec.stats.drafted
    for level in (1, 2):  # tokens drafted and verified (the first comes from the prompt's pass)
        samples = [toks[level] for toks, _, _ in got.values()]
        assert _tv(samples, exact[level]) < 0.05, level


def test_mismatched_draft_is_refused(backends, tiny, smollm2_path):
    target = backends["target"]
    with pytest.raises(ModelLoadError, match="different tokenizers"):
        load_speculator(target, str(tiny["foreign"]), CFG)
    with pytest.raises(ModelLoadError, match="vocabulary has"):
        load_speculator(target, str(smollm2_path), CFG)
    spec = load_speculator(target, str(tiny["close"]), CFG, "close-model")
    try:
        assert spec.mode_for("close-model") == "model" and spec.mode_for(None) == "model"
        with pytest.raises(ValueError, match="not loaded"):
            spec.mode_for("some-other-model")
    finally:
        spec.draft.close()


def test_asking_for_a_draft_on_a_server_without_one_is_rejected(backends):
    fresh(backends["target"])
    engine = Engine(backends["target"], 2)
    with pytest.raises(RequestRejected, match="--draft"):
        engine.add_request("x", [5, 6], SamplingParams(draft="ngram"))
    engine = Engine(backends["target"], 2, speculator=Speculator(backends["target"], None, default="ngram"))
    with pytest.raises(RequestRejected, match="no draft model"):
        engine.add_request("y", [5, 6], SamplingParams(draft="model"))
    assert not engine.has_work()
