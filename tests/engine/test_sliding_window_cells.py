"""Sliding-window layers keep a window of cells per sequence id, not the whole context.

llama.cpp sizes them ``pad256(window * n_seq_max + n_ubatch)``: the worker gives a model with
sliding-window layers its running sequences and ``SWA_HOLDER_SEQS`` holders, not the 32 of a
full-attention model. Cells that a prefix hit shares stay until all but one of their
sequences let them go, so the window budget can run out while the block accounting has room:
the engine then drops an idle holder and runs the step again.
"""

from __future__ import annotations

import pytest

import llama_cpp as lc

from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.config import SWA_HOLDER_SEQS
from runtime.engine.engine import CacheConfig, Engine
from runtime.engine.request import FinishReason
from runtime.sampling_params import SamplingParams
from tests.greedy_reference import assert_greedy_throughout, assert_same_or_near_tie, greedy_reference


def _text(topic: str, n: int) -> str:
    return "".join(f"Entry {i} about {topic}: the {topic} station logged reading {i * 7 % 97} at hour {i % 24}, "
                   f"and the keeper noted the {topic} wind and the colour of the sky. " for i in range(n))


def test_a_sliding_window_model_gets_a_window_per_running_sequence(gemma_path, smollm2_path):
    config = ContextConfig(n_ctx=4096, n_seq_max=2 + 32, n_seq_running=2, n_batch=128)
    g = LlamaBackend(gemma_path, config)
    try:
        assert g.n_seq_max == 2 + SWA_HOLDER_SEQS
        # one sequence longer than the window cells of 4 sequences (2304): llama.cpp reuses the
        # cells that left its window, which the whole-context layout (swa_full) never does
        tokens = g.tokenize(_text("harbour", 90))[:3000]
        assert len(tokens) == 3000
        for start in range(0, len(tokens), 128):
            g.batch.clear()
            g.batch.add(tokens[start:start + 128], start, 0, False)
            g.decode(g.batch)
        assert g.seq_pos_max(0) == 2999
        assert lc.llama_memory_seq_pos_min(g.memory, 0) > 0
    finally:
        g.close()
    s = LlamaBackend(smollm2_path, config)
    try:
        assert s.n_seq_max == 34  # a full-attention model: its ids cost nothing until used
    finally:
        s.close()


def test_cells_shared_past_the_window_make_an_idle_holder_give_way(gemma_path):
    """Two idle holders, and two running requests that decode long answers: B's prefix hit on
    A's sequence shares a window of cells that both then leave behind. Holders, running
    windows and those shared cells are more than the 4 windows: a step finds no room until a
    holder is dropped. Every token of every reply is still a greedy choice of its own context
    computed alone (both long replies start at a near tie, so one reference text would leave
    them unchecked after their first token on some builds)."""
    b = LlamaBackend(gemma_path, ContextConfig(n_ctx=4096, n_seq_max=2 + 32, n_seq_running=2, n_batch=128))
    e = Engine(b, 2, CacheConfig(16, True, 1.0, host_mib=0))
    shared = b.tokenize(_text("lighthouse", 18))
    prompts = {"h1": b.tokenize(_text("mill", 14)), "h2": b.tokenize(_text("bridge", 14)),
               "a": shared + b.tokenize("Now tell the story of the keeper in many words.", add_special=False),
               "b": shared + b.tokenize("Now list the ships the keeper saw, one by one.", add_special=False)}
    assert 512 < len(shared) < 700
    lengths = {"h1": 8, "h2": 8, "a": 600, "b": 600}
    requests = {}

    def add(k: str) -> None:
        params = SamplingParams(temperature=0, max_tokens=lengths[k], ignore_eos=True)
        requests[k] = e.add_request(k, prompts[k], params)

    def run_until(done) -> None:
        while e.has_work() and not done():
            e.step()

    try:
        for k in ("h1", "h2"):
            add(k)
            run_until(lambda: False)
        assert e.stats().kv.holders == 2
        add("a")
        run_until(lambda: requests["a"].num_output > 0)
        add("b")
        run_until(lambda: False)
    finally:
        holders_dropped = e.kv.holders_dropped
        ref = LlamaBackend(gemma_path, ContextConfig(n_ctx=4096, n_seq_max=1, n_batch=2048))
        try:
            flips = [assert_greedy_throughout(ref, prompts[k], requests[k].tokens[len(prompts[k]):], tol=1.5)
                     for k in prompts]
        finally:
            ref.close()
            b.close()
    assert requests["b"].cached_tokens == len(shared) // 16 * 16  # the hit on A's running sequence
    assert all(r.finish_reason is FinishReason.LENGTH and r.num_output == lengths[k] for k, r in requests.items())
    assert holders_dropped >= 1 and e.scheduler.num_preemptions == 0
    assert sum(flips) <= 4, flips


def test_a_prefix_whose_holder_is_the_oldest_survives_the_wait_for_a_sequence_id(gemma_path):
    """Every sequence id is an idle holder (an agent's requests, one after another), and the
    next request's prefix is held by the least recently used of them: the id it needs comes
    from another holder, and the hit stands (a hit whose holder was dropped for that id would
    point at cells nobody holds)."""
    b = LlamaBackend(gemma_path, ContextConfig(n_ctx=4096, n_seq_max=2 + 32, n_seq_running=2, n_batch=128))
    e = Engine(b, 2, CacheConfig(16, True, 1.0, host_mib=0))
    topics = ("lighthouse", "mill", "bridge", "harbour")
    prompts = {t: b.tokenize(_text(t, 3)) for t in topics}
    prompts["again"] = prompts["lighthouse"] + b.tokenize(" And then the keeper", add_special=False)
    replies: dict[str, str] = {k: "" for k in prompts}
    requests = {}
    try:
        for k in prompts:
            requests[k] = e.add_request(k, prompts[k], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
            while e.has_work():
                for o in e.step():
                    replies[o.request_id] += o.text
                    assert o.error is None, o.error
            if k == topics[-1]:
                assert e.stats().kv.holders == b.n_seq_max  # no free id: one holder must give way
        ref = LlamaBackend(gemma_path, ContextConfig(n_ctx=4096, n_seq_max=1, n_batch=2048))
        try:
            expected = greedy_reference(ref, prompts["again"], 4, ignore_eos=True)
        finally:
            ref.close()
    finally:
        b.close()
    assert requests["again"].cached_tokens == len(prompts["lighthouse"]) // 16 * 16
    assert requests["again"].finish_reason is FinishReason.LENGTH
    assert_same_or_near_tie(replies["again"], expected, tol=1.5)


def test_a_request_the_scheduler_was_admitting_when_the_step_raised_is_answered(smollm2_path, monkeypatch):
    """A fault while a request moves from waiting to running (here injected into its
    admission) leaves it in neither list: the step's failure must still answer it, or its
    client waits forever."""
    b = LlamaBackend(smollm2_path, ContextConfig(n_ctx=1024, n_seq_max=4, n_batch=128))
    e = Engine(b, 2, CacheConfig(16, True, 1.0, host_mib=0))
    try:
        def broken(*args, **kwargs):
            raise IndexError("injected")
        monkeypatch.setattr(e.kv, "admit", broken)
        e.add_request("r", b.tokenize("Hello there"), SamplingParams(temperature=0, max_tokens=4))
        try:
            outputs = e.step()
        except IndexError as err:
            outputs = e.fail_step(err)
        assert [(o.request_id, o.finish_reason) for o in outputs] == [("r", FinishReason.ERROR.value)]
        assert "injected" in (outputs[0].error or "") and not e.has_work() and not e.requests
    finally:
        b.close()
