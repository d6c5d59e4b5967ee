"""Constrained decoding under speculation stays exact (tiny models, real llama.cpp contexts).

The tiny vocabulary is ``t00``..``t60`` and the printable ASCII characters (a grammar matcher
needs single-byte tokens to walk its token trie, as every real vocabulary has); the constraint
is a regular expression over it, so the grammar decides which tokens are allowed at each
position and the draft (whose own argmax usually is not allowed) is masked too.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.engine.constraint import compile_constraint
from runtime.engine.engine import Engine
from runtime.sampling_params import SamplingParams
from runtime.engine.speculator import Speculator
from tests.spec.test_spec_engine import _tv, prompts
from tests.spec.tiny_models import vocab, write_tiny

CFG = ContextConfig(n_ctx=1024, n_seq_max=8, n_batch=128, n_threads=1)
#: alternating "decades": t1x then t2x/t3x, eight tokens
PATTERN = r"(t1[0-9](t2[0-9]|t3[0-9])){4}"


TOKENS = vocab() + [chr(i) for i in range(33, 127)]


@pytest.fixture(scope="module")
def backends(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny-constrained")
    paths = {"target": write_tiny(d / "target.gguf", seed=0, tokens=TOKENS),
             "close": write_tiny(d / "close.gguf", seed=0, noise=0.01, tokens=TOKENS),
             "other": write_tiny(d / "other.gguf", seed=5, tokens=TOKENS)}
    out = {name: LlamaBackend(path, CFG) for name, path in paths.items()}
    yield out
    for b in out.values():
        b.close()


def run(engine, requests, constraint):
    reqs = {rid: engine.add_request(rid, p, params, constraint=constraint) for rid, p, params in requests}
    texts, finish = {rid: "" for rid in reqs}, {}
    while engine.has_work():
        for o in engine.step():
            texts[o.request_id] += o.text
            if o.finish_reason:
                finish[o.request_id] = o.finish_reason
    return {rid: (r.tokens[r.prompt_len:], texts[rid], finish.get(rid)) for rid, r in reqs.items()}


def greedy(n=10):
    return [(f"g{i}", p, SamplingParams(temperature=0, max_tokens=20, ignore_eos=True))
            for i, p in enumerate(prompts(n, seed=4))]


@pytest.mark.parametrize("draft", ["close", "other", "ngram"])
def test_constrained_greedy_with_a_draft_is_identical_to_without(backends, draft):
    constraint = compile_constraint("regex", PATTERN)
    for b in backends.values():
        b.clear()
    ref = run(Engine(backends["target"], 4), greedy(), constraint)
    for tokens, text, finish in ref.values():
        assert re.fullmatch(PATTERN, text), text
        assert finish == "stop"  # the grammar is complete after 8 tokens
    for b in backends.values():
        b.clear()
    if draft == "ngram":
        spec = Speculator(backends["target"], None, default="ngram", fixed_k=4)
    else:
        spec = Speculator(backends["target"], backends[draft], fixed_k=4)
    got = run(Engine(backends["target"], 4, speculator=spec), greedy(), constraint)
    assert got == ref
    if draft != "ngram":
        assert spec.stats.drafted > 20
    if draft == "close":
        assert spec.stats.accepted > 0


def _masked_exact(backend, prompt, params, constraint_spec, vocab_engine):
    """The constrained target's exact distribution of the second output token."""
    from runtime.engine.constraint import Constraint
    from runtime.kernels.speculative import candidates

    c = Constraint(vocab_engine.constraint_vocab(), constraint_spec)
    backend.clear()
    backend.batch.clear()
    i = backend.batch.add(list(prompt), 0, 0, True)
    backend.decode(backend.batch)
    row = backend.logits(i).copy()
    c.mask_logits(row)
    first = candidates(row, params, prompt)
    out: dict[int, float] = {}
    for t, p in zip(first.ids.tolist(), first.probs.tolist()):
        if p == 0.0:
            continue
        backend.clear()
        backend.batch.clear()
        j = backend.batch.add(list(prompt) + [t], 0, 0, True)
        backend.decode(backend.batch)
        row = backend.logits(j).copy()
        c.advance(t)
        c.mask_logits(row)
        c.rollback(1)
        second = candidates(row, params, list(prompt) + [t])
        for u, q in zip(second.ids.tolist(), second.probs.tolist()):
            out[u] = out.get(u, 0.0) + p * q
    backend.clear()
    return out


def test_constrained_sampling_with_a_draft_matches_the_constrained_target(backends):
    constraint = compile_constraint("regex", PATTERN)
    prompt = prompts(1, seed=7)[0]
    params = SamplingParams(temperature=1.0, top_k=0, max_tokens=3, ignore_eos=True)
    engine = Engine(backends["target"], 8)
    exact = _masked_exact(backends["target"], prompt, params, constraint, engine)
    assert len(exact) > 3 and abs(sum(exact.values()) - 1.0) < 1e-6
    n = 1500
    reqs = [(f"s{i}", prompt, SamplingParams(temperature=1.0, top_k=0, max_tokens=3, ignore_eos=True, seed=i))
            for i in range(n)]
    for b in backends.values():
        b.clear()
    spec = Speculator(backends["target"], backends["other"], fixed_k=2)
    got = run(Engine(backends["target"], 8, speculator=spec), reqs, constraint)
    assert spec.stats.drafted > 0.9 * n and 0 < spec.stats.accepted < spec.stats.drafted
    samples = [toks[1] for toks, _, _ in got.values()]  # drafted and verified
    assert _tv(samples, exact) < 0.06
    from runtime.engine.constraint import Constraint
    for toks, _, _ in got.values():  # every sample is a prefix the grammar allows
        c = Constraint(engine.constraint_vocab(), constraint)
        for t in toks:
            c.advance(t)


def test_masked_kernel_verification_matches_the_masked_target():
    """The kernel's rejection sampling on masked, renormalised p and q gives the masked p."""
    from runtime.engine.constraint import apply_mask
    from runtime.kernels.speculative import candidates, dense_support, sample, verify

    rng = np.random.default_rng(11)
    v = 64
    params = SamplingParams(temperature=0.8, top_k=0)
    allowed = rng.random((3, v)) < 0.4
    bits = np.packbits(allowed, axis=1, bitorder="little").view(np.int32)
    p_rows, q_rows = [], []
    for j in range(3):
        for rows in (p_rows, q_rows):
            logits = rng.normal(0, 2, v).astype(np.float32)
            apply_mask(logits, bits[j])
            rows.append(candidates(logits, params))
    ids, dense = dense_support(p_rows + q_rows[:2])
    p, q = dense[None, :3], dense[None, 3:5]
    trials = 100_000
    pb, qb = np.broadcast_to(p, (trials,) + p.shape[1:]), np.broadcast_to(q, (trials,) + q.shape[1:])
    draft = sample(qb, rng)
    n_acc, tok = verify(pb, qb, draft, rng)
    first = ids[np.where(n_acc == 0, tok, draft[:, 0])]
    assert np.all(allowed[0, first]) and np.all(allowed[0, ids[draft[:, 0]]])
    counts = np.bincount(first, minlength=v) / trials
    exact = np.zeros(v)
    exact[p_rows[0].ids] = p_rows[0].probs
    assert 0.5 * np.abs(counts - exact).sum() < 0.01


def test_a_bad_constraint_fails_only_its_request(backends):
    from runtime.engine.constraint import ConstraintSpec
    from runtime.engine.engine import RequestRejected

    for b in backends.values():
        b.clear()
    engine = Engine(backends["target"], 4)
    with pytest.raises(RequestRejected, match="constraint"):
        engine.add_request("bad", prompts(1)[0], SamplingParams(temperature=0, max_tokens=5),
                           constraint=ConstraintSpec("lark", '{"grammars": [{"lark_grammar": "start: nope"}]}'))
    got = run(engine, greedy(2), compile_constraint("regex", PATTERN))
    assert all(re.fullmatch(PATTERN, text) for _, text, _ in got.values())


def test_a_lazy_constraint_starts_at_its_trigger(backends):
    """Free text until the trigger appears; from there the grammar (which starts with the
    trigger) holds, and the request ends when it is complete."""
    for b in backends.values():
        b.clear()
    engine = Engine(backends["target"], 4)
    free = run(engine, greedy(6), None)
    # a trigger the free greedy text reaches: its 3rd and 4th tokens
    rid, (tokens, text, _) = next(iter(free.items()))
    trigger = backends["target"].detokenize(tokens[2:4])
    spec = compile_constraint("regex", re.escape(trigger) + "(t5[0-9])(t5[0-9])", trigger=trigger)
    for b in backends.values():
        b.clear()
    got = run(Engine(backends["target"], 4), [(rid, greedy(6)[0][1], SamplingParams(temperature=0, max_tokens=20,
                                                                                      ignore_eos=True))], spec)
    out = got[rid][1]
    assert out.startswith(text[:len(backends["target"].detokenize(tokens[:4]))])
    assert re.fullmatch(re.escape(backends["target"].detokenize(tokens[:4])) + "t5[0-9]t5[0-9]", out), out
    assert got[rid][2] == "stop"


def test_a_grammar_that_dead_ends_mid_reply_fails_cleanly_without_the_matchers_state(backends):
    """A rule that only refers to itself, on a branch the compile-time walk does not take (it
    follows the lowest byte: ``t10``): the matcher finds it once a reply takes that branch. The
    error is the library's reason, short, without the matcher's state or the grammar."""
    from runtime.engine.constraint import Constraint, ConstraintError, check_matches

    spec = compile_constraint("lark", 'start: "t10" "t12" | "t11" loop\nloop: loop "t13"')
    check_matches(spec)
    engine = Engine(backends["target"], 4)
    c = Constraint(engine.constraint_vocab(), spec)
    with pytest.raises(ConstraintError) as e:
        c.advance(TOKENS.index("t11"))
        c.compute_mask()
    assert e.value.code == "constraint_failed"
    message = str(e.value)
    assert "<state>" not in message and "Parser" not in message and "loop" not in message and len(message) < 300
