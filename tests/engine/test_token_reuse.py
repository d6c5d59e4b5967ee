"""The prefix cache at token granularity: a prompt reuses every token it shares with a cached
one (a finished request's partial last block, a full block it parts from inside), recomputes
only the rest, and answers as a recomputation does; seeded sampling stays block-aligned."""

from __future__ import annotations

import pytest

from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.engine.engine import CacheConfig, Engine
from runtime.sampling_params import SamplingParams
from tests.greedy_reference import assert_same_or_near_tie, greedy_reference

B = 16
TEXT = ("The river ran along the old mill, past the bakery and the school, and on to the sea. "
        "In spring the water was high and brown; in autumn it was low and clear. ")


def make(path, parallel=2, n_ctx=2048, extra_seqs=4):
    b = LlamaBackend(path, ContextConfig(n_ctx=n_ctx, n_seq_max=parallel + extra_seqs, n_batch=256))
    return Engine(b, parallel, CacheConfig(B, True, 1.0))


def run(engine: Engine, rid: str, prompt: list[int], n: int, **params) -> tuple[list[int], int]:
    req = engine.add_request(rid, prompt, SamplingParams(**{"temperature": 0, "max_tokens": n, **params}))
    while engine.has_work():
        engine.step()
    return req.tokens[req.prompt_len:], req.cached_tokens


@pytest.fixture(scope="module")
def engine(smollm2_path):
    e = make(smollm2_path)
    yield e
    e.backend.close()


def test_a_continued_prompt_reads_its_whole_previous_turn_reply_included(engine, smollm2_path):
    b = engine.backend
    first = b.tokenize(TEXT * 2)
    reply, _ = run(engine, "a", first, 11)
    # the client sends the reply back as the model wrote it, then new text
    second = first + reply + b.tokenize(" Then the children came home.", add_special=False)
    out, cached = run(engine, "b", second, 8)
    # every token with cells: the prompt and the reply but its last token (never decoded)
    assert cached == len(first) + len(reply) - 1
    assert cached % B != 0  # not a block boundary: the partial last block was reused
    ref = LlamaBackend(smollm2_path, ContextConfig(n_ctx=2048, n_seq_max=1, n_batch=256))
    try:
        assert_same_or_near_tie(b.detokenize(out), greedy_reference(ref, second, 8))
    finally:
        ref.close()


def test_a_prompt_that_parts_inside_a_block_reuses_the_tokens_before_it(engine):
    b = engine.backend
    common = b.tokenize(TEXT + "Over the bridge went")
    assert len(common) % B not in (0, 1)
    run(engine, "c1", common + b.tokenize(" a cart of apples.", add_special=False), 4)
    _, cached = run(engine, "c2", common + b.tokenize(" three geese in a row.", add_special=False), 4)
    # the shared tokens exactly: the full blocks, then those of the block it parts from inside
    assert cached >= len(common) - 1 and cached <= len(common) + 1


def test_a_repeated_prompt_computes_only_its_last_token(engine):
    b = engine.backend
    prompt = b.tokenize(TEXT + "Once upon a time, by the river,")
    first, _ = run(engine, "r1", prompt, 6)
    again, cached = run(engine, "r2", prompt, 6)
    assert cached == len(prompt) - 1
    assert again == first


def test_seeded_sampling_stays_block_aligned_and_reproducible(engine):
    b = engine.backend
    prompt = b.tokenize(TEXT + "A story about a fox:")
    params = dict(temperature=1.0, seed=11)
    outs, hits = zip(*(run(engine, f"s{i}", prompt, 12, **params) for i in range(3)))
    assert outs[0] == outs[1] == outs[2]
    assert all(h % B == 0 for h in hits[1:]) and hits[2] == (len(prompt) - 1) // B * B


def test_tails_are_evicted_like_any_cached_block(smollm2_path):
    """A small pool: many finished prompts whose tails and blocks are evicted in turn; every
    later hit still answers as a recomputation does (no cell of an evicted tail is copied)."""
    e = make(smollm2_path, n_ctx=640, extra_seqs=14)  # 40 blocks; enough holders that blocks go first
    ref = LlamaBackend(smollm2_path, ContextConfig(n_ctx=2048, n_seq_max=1, n_batch=256))
    try:
        b = e.backend
        prompts = [b.tokenize(f"Note {i}: " + TEXT[:60 + 7 * i] + TEXT * 2) for i in range(8)]
        for i, p in enumerate(prompts * 2):
            out, _ = run(e, f"e{i}", p, 5)
            assert_same_or_near_tie(b.detokenize(out), greedy_reference(ref, p, 5))
        assert e.kv.pool.evictions > 0
    finally:
        ref.close()
        e.backend.close()


def test_a_sliding_window_model_reuses_whole_blocks_only(gemma_path):
    e = make(gemma_path)
    try:
        b = e.backend
        assert not e.kv.token_reuse
        prompt = b.tokenize(TEXT * 2)
        run(e, "w1", prompt, 4)
        _, cached = run(e, "w2", prompt, 4)
        assert cached % B == 0
    finally:
        e.backend.close()
