"""The scheduler: exact chunks, admission, budget, preemption.

Decisions only: nothing is decoded. The KV manager acts on a real (empty) llama.cpp
context; with blocks of one token, block counts are cell counts.
"""

import pytest

from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.engine.kv_cache_manager import KVCacheManager
from runtime.engine.request import Request, RequestStatus
from runtime.sampling_params import SamplingParams
from runtime.engine.scheduler import Scheduler, SchedulerConfig


@pytest.fixture(scope="module")
def memory(smollm2_path):
    b = LlamaBackend(smollm2_path, ContextConfig(n_ctx=256, n_seq_max=4, n_batch=64))
    yield b
    b.close()


def make(rid: str, prompt_len: int) -> Request:
    return Request(rid, prompt_len, list(range(prompt_len)), SamplingParams(), max_tokens=100)


def run_step(s: Scheduler, sample_token: int = 7):
    """What the engine does after decode: mark computed, append a sampled token."""
    chunks = s.schedule()
    for c in chunks:
        c.request.num_computed = c.end
        if c.samples:
            c.request.tokens.append(sample_token)
    return [(c.request.request_id, c.start, c.end) for c in chunks]


@pytest.fixture()
def new(memory):
    def make(max_running=2, budget=8, capacity=64, n_seq=2):
        kv = KVCacheManager(memory, capacity, 1, n_seq, prefix_cache=False)
        return Scheduler(SchedulerConfig(max_running, budget), kv)
    return make


def test_long_prompt_is_chunked_by_the_token_budget(new):
    s = new(budget=8)
    s.add(make("a", 20))
    assert run_step(s) == [("a", 0, 8)]
    assert run_step(s) == [("a", 8, 16)]
    assert run_step(s) == [("a", 16, 20)]
    assert run_step(s) == [("a", 20, 21)]  # decoding: one token per step


def test_decode_tokens_come_before_other_prefill(new):
    s = new(budget=8)
    s.add(make("a", 3))
    run_step(s)
    s.add(make("b", 20))
    assert run_step(s) == [("a", 3, 4), ("b", 0, 7)]
    assert run_step(s) == [("a", 4, 5), ("b", 7, 14)]


def test_requests_beyond_parallel_wait_in_queue(new):
    s = new(max_running=2, n_seq=2)
    for rid in "abc":
        s.add(make(rid, 2))
    assert [r for r, *_ in run_step(s)] == ["a", "b"]
    assert [r.request_id for r in s.waiting] == ["c"]
    s.remove(s.running[0])
    assert [r for r, *_ in run_step(s)] == ["b", "c"]


def test_remove_releases_the_blocks_at_once(new):
    s = new()
    s.add(make("a", 4))
    run_step(s)
    assert s.kv.pool.num_used == 4
    a = s.running[0]
    s.remove(a)
    assert s.used_cells == 0 and s.kv.pool.num_used == 0
    assert a.status is RequestStatus.FINISHED and a.seq_id is None


def test_admission_waits_until_the_whole_prompt_fits_beside_running_decodes(new):
    s = new(max_running=2, budget=16, capacity=11)
    s.add(make("a", 5))
    s.add(make("b", 6))
    # after a's 5 cells, 6 are free; b needs 6 plus one decode cell for a
    assert run_step(s) == [("a", 0, 5)]
    assert run_step(s) == [("a", 5, 6)]
    assert [r.request_id for r in s.waiting] == ["b"]
    s.remove(s.running[0])
    assert run_step(s) == [("b", 0, 6)]


def test_preemption_requeues_newest_at_head_and_recomputes_its_tokens(new):
    s = new(max_running=2, budget=16, capacity=10)
    s.add(make("a", 4))
    s.add(make("b", 4))
    run_step(s)  # a: 4 computed + sampled; b admitted only if 4 <= 10-4-1
    assert [r.request_id for r in s.running] == ["a", "b"]
    run_step(s)  # a 5, b 5 computed
    run_step(s)  # a 6? capacity 10 -> 5+5 used, a needs 1: preempt b
    assert [r.request_id for r in s.running] == ["a"]
    b = s.waiting[0]
    assert b.request_id == "b" and b.num_computed == 0 and b.num_preemptions == 1
    assert s.kv.pool.num_used == 6  # a: 6 cells; b's were released
    assert b.num_pending == len(b.tokens)  # prompt + its outputs are recomputed



def test_lookahead_given_at_construction_reserves_drafts_after_a_decode_token(memory):
    """The lookahead is asked only for decoding requests, and its K slots are reserved beside
    the token; the answer is a query, so asking it twice changes nothing."""
    asked = []

    def lookahead(request, n_decoding):
        asked.append((request.request_id, n_decoding))
        return 3

    kv = KVCacheManager(memory, 64, 1, 2, prefix_cache=False)
    s = Scheduler(SchedulerConfig(2, 8), kv, lookahead)
    s.add(make("a", 5))
    assert run_step(s) == [("a", 0, 5)] and not asked  # prefill: no drafts
    chunks = s.schedule()
    assert [(c.request.request_id, c.start, c.end, c.k) for c in chunks] == [("a", 5, 6, 3)]
    assert asked == [("a", 1)]
    assert len(kv.tables["a"]) == 6 + 3  # one-token blocks: the token and its three drafts


# -- fairness between clients ----------------------------------------------------------------------
def owned(rid: str, client: str, prompt_len: int = 3) -> Request:
    r = make(rid, prompt_len)
    r.client = client
    return r


def test_a_client_with_many_requests_queued_does_not_go_before_a_newcomer(new):
    """Client a queues six requests on two places; b's one request goes next, not after a's four
    waiting ones; a's own requests keep their order, and a third client c goes beside b."""
    s = new(max_running=2, budget=64, capacity=64, n_seq=4)
    for i in range(6):
        s.add(owned(f"a{i}", "a"))
    run_step(s)  # a0 and a1 run
    s.add(owned("b0", "b"))
    s.add(owned("a6", "a"))
    s.add(owned("c0", "c"))
    s.add(owned("b1", "b"))
    # b1 is b's second request, a2 a's third: b1 first
    assert [r.request_id for r in s.waiting] == ["b0", "c0", "b1", "a2", "a3", "a4", "a5", "a6"]


def test_a_client_with_nothing_running_starts_at_once_beside_another_clients_places(new):
    s = new(max_running=2, budget=64, capacity=64, n_seq=4)
    for i in range(3):
        s.add(owned(f"a{i}", "a"))
    run_step(s)
    assert [r.request_id for r in s.running] == ["a0", "a1"]
    s.add(owned("b0", "b"))
    run_step(s)  # a guest: one place beyond max_running, for b only
    assert [r.request_id for r in s.running] == ["a0", "a1", "b0"]
    s.add(owned("c0", "c"))
    run_step(s)  # one guest at a time
    assert [r.request_id for r in s.running] == ["a0", "a1", "b0"]
    assert [r.request_id for r in s.waiting] == ["c0", "a2"]


def test_one_clients_requests_never_take_the_guest_place(new):
    s = new(max_running=2, budget=64, capacity=64, n_seq=4)
    for i in range(4):
        s.add(owned(f"a{i}", "a"))
    for _ in range(3):
        run_step(s)
    assert [r.request_id for r in s.running] == ["a0", "a1"]


def test_requests_of_no_client_keep_arrival_order(new):
    s = new(max_running=1, budget=64, capacity=64, n_seq=4)
    for i in range(5):
        s.add(make(f"r{i}", 3))
    assert [r.request_id for r in s.waiting] == [f"r{i}" for i in range(5)]
