"""Prompt lookup: the longest earlier match is the draft, and a copy in progress drafts far."""

from __future__ import annotations

import numpy as np
import pytest

from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.engine.engine import Engine
from runtime.engine.prompt_lookup import COPY_MATCH, MAX_MATCH, lookup
from runtime.engine.spec_costs import K_MAX
from runtime.engine.speculator import Speculator
from runtime.sampling_params import SamplingParams
from tests.greedy_reference import greedy_reference


def _reference(tokens: list[int], k: int, max_match: int) -> tuple[list[int], int] | None:
    """Brute force: every earlier position, its match length, the longest (latest on ties)."""
    n = len(tokens)
    best, best_len = None, 0
    for i in range(n - 1):
        m = 0
        while m < max_match and i - m >= 0 and tokens[i - m] == tokens[n - 1 - m]:
            m += 1
        if m and m >= best_len:
            best, best_len = i, m
    if best is None or k < 1:
        return None
    return tokens[best + 1:best + 1 + k], best_len


def test_the_longest_match_wins_over_a_more_recent_short_one():
    #            a long match of the ending ... a later, shorter one ... the ending
    tokens = [1, 2, 3, 4, 9, 7, 3, 4, 8, 5, 1, 2, 3, 4]
    found = lookup(tokens, 3)
    assert found is not None and found.tokens == [9, 7, 3] and found.match == 4
    # equally long: the most recent
    found = lookup([5, 1, 2, 6, 1, 2, 7, 1, 2], 2)
    assert found is not None and found.tokens == [7, 1] and found.match == 2
    assert lookup([1, 2, 3], 4) is None  # the last token never occurred before
    assert lookup([1, 1], 0) is None


def test_a_match_is_counted_up_to_its_cap_and_a_long_one_is_a_copy():
    span = list(range(100, 140))
    found = lookup(span + [7] + span[:30], 5)
    assert found is not None and found.match == MAX_MATCH and found.copy and found.tokens == span[30:35]
    short = lookup([1, 2, 3, 9] + [2, 3], 5)
    assert short is not None and short.match == 2 and not short.copy and COPY_MATCH > 2


@pytest.mark.parametrize("alphabet", [2, 4, 30])
def test_lookup_agrees_with_a_brute_force_search(alphabet):
    rng = np.random.default_rng(alphabet)
    for _ in range(300):
        tokens = rng.integers(0, alphabet, int(rng.integers(1, 60))).tolist()
        k, cap = int(rng.integers(0, 8)), int(rng.integers(1, 12))
        found = lookup(tokens, k, cap)
        want = _reference(tokens, k, cap)
        assert (None if found is None else (found.tokens, found.match)) == want, (tokens, k, cap)


def test_a_copy_drafts_past_the_model_drafts_limit_and_greedy_output_is_unchanged(gemma_path):
    """Gemma 3 270M asked to write a file again copies it: once the match is long, drafts go
    further than a draft model's K (they cost no draft pass), a verification pass brings
    three tokens or more, and the text is the target's alone."""
    body = "\n".join(f"def step_{i}(state):\n    state.count += {i}\n    return state\n" for i in range(12))
    target = LlamaBackend(gemma_path, ContextConfig(n_ctx=2048, n_seq_max=2, n_batch=512, n_threads=2))
    try:
        prompt = target.tokenize(f"Here is utils.py:\n```python\n{body}```\nThe same file again:\n```python\n")
        ref = greedy_reference(target, prompt, 160)
        spec = Speculator(target, None, default="ngram")
        engine = Engine(target, 2, speculator=spec)
        engine.add_request("edit", prompt, SamplingParams(temperature=0, max_tokens=160))
        text = ""
        while engine.has_work():
            text += "".join(o.text for o in engine.step())
        assert text == ref.text
        s = spec.stats
        assert max(s.per_k) > K_MAX, s.per_k
        assert s.verifications < 160 / 3, s.as_dict()
    finally:
        target.close()
