"""Greedy identity with a real model pair: SmolLM2 135M, drafted by its own Q4_0 requantization."""

from __future__ import annotations

import pytest

from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.backends.quantize import requantized
from runtime.engine.engine import Engine
from runtime.sampling_params import SamplingParams
from runtime.engine.speculator import Speculator
from tests.greedy_reference import assert_same_or_near_tie, greedy_reference

PROMPTS = ["Once upon a time", "The quick brown fox jumps", "def fibonacci(n):", "In 1492,",
           "Water boils at", "A haiku about rain:\n", "List three colors:", "The capital of France is"]


@pytest.fixture(scope="module")
def pair(smollm2_path, tmp_path_factory):
    draft_path = requantized(smollm2_path, "q4_0", tmp_path_factory.mktemp("draft"))
    cfg = ContextConfig(n_ctx=2048, n_seq_max=8, n_batch=256, n_threads=1)
    target, draft = LlamaBackend(smollm2_path, cfg), LlamaBackend(draft_path, cfg)
    yield target, draft
    target.close()
    draft.close()


def test_greedy_with_a_real_draft_matches_the_target_alone(pair):
    target, draft = pair
    n_tokens = [12 + 4 * i for i in range(len(PROMPTS))]
    refs = [greedy_reference(target, target.tokenize(p), n) for p, n in zip(PROMPTS, n_tokens)]
    spec = Speculator(target, draft, fixed_k=4)
    engine = Engine(target, 4, speculator=spec)
    for i, (p, n) in enumerate(zip(PROMPTS, n_tokens)):  # 8 requests, 4 at once
        stop = ["\n\n"] if i % 2 else []
        engine.add_request(f"{i}", target.tokenize(p), SamplingParams(temperature=0, max_tokens=n, stop=stop))
    texts, finish = {}, {}
    while engine.has_work():
        for o in engine.step():
            texts[o.request_id] = texts.get(o.request_id, "") + o.text
            if o.finish_reason:
                finish[o.request_id] = o.finish_reason
    same = 0
    for i, ref in enumerate(refs):
        expected = ref.text.split("\n\n")[0] if i % 2 and "\n\n" in ref.text else None
        if expected is not None and texts[f"{i}"] == expected:
            same += 1
            continue
        same += assert_same_or_near_tie(texts[f"{i}"], ref)
    # every divergence was checked to start at a near-tie (a verify pass of K+1 tokens per
    # sequence changes the batch shapes, so flips are likelier than in plain batching)
    assert same >= len(PROMPTS) // 2
    assert len(finish) == len(PROMPTS)
    assert spec.stats.drafted > 50 and spec.stats.accepted > 0.15 * spec.stats.drafted
    assert engine.stats().kv_cells_used == 0
