"""The embedding worker's fair queue: batches within their bounds, the lead going round, a small
job served in the next batch beside a huge one, cancellation dropping what has not run, results
back in each job's input order."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from runtime.engine.embed_jobs import ActiveJob, FairQueue
from runtime.engine.embed_messages import EmbedJob


@dataclass(slots=True)
class Enc:
    ids: list[int]


def job(rid: str, lengths: list[int], op: str = "embed") -> ActiveJob:
    """A job whose input i has lengths[i] tokens, each token id = i (to find it in the results)."""
    return ActiveJob.of(EmbedJob(rid, op), [Enc([i] * n) for i, n in enumerate(lengths)])


def run(queue: FairQueue, batch) -> list[ActiveJob]:
    """Answer each input with [input index, length] (as a vector), like an embedder."""
    out = np.array([[e.ids[0], len(e.ids)] for e in batch.inputs()], dtype=np.float32)
    return queue.finish(batch, out)


def test_results_come_back_in_the_job_order_though_inputs_run_shortest_first():
    q = FairQueue(max_rows=2, max_tokens=1000)
    j = job("a", [5, 1, 9, 3, 7])
    q.add(j)
    widths = []
    done = []
    while (b := q.next_batch()) is not None:
        widths.append([len(e.ids) for e in b.inputs()])
        done += run(q, b)
    assert widths == [[1, 3], [5, 7], [9]]  # sorted by length: little padding
    assert done == [j] and len(q) == 0
    assert j.values().tolist() == [[0, 5], [1, 1], [2, 9], [3, 3], [4, 7]] and j.n_tokens == 25


def test_a_batch_stays_within_rows_and_padded_tokens_but_one_input_always_fits():
    q = FairQueue(max_rows=4, max_tokens=100)
    q.add(job("a", [30, 30, 30, 30, 200]))
    sizes = []
    while (b := q.next_batch()) is not None:
        sizes.append([len(e.ids) for e in b.inputs()])
        run(q, b)
    assert sizes == [[30, 30, 30], [30], [200]]  # 4 x 30 > 100; a 200-token input alone


def test_a_small_job_runs_in_the_next_batch_while_a_huge_one_waits_its_turn():
    q = FairQueue(max_rows=4, max_tokens=10_000)
    big = job("big", [10] * 2048)
    q.add(big)
    run(q, q.next_batch())  # the big job alone
    small = job("small", [3, 4])
    q.add(small)
    b = q.next_batch()
    assert [p[0].request_id for p in b.parts] == ["small"]  # it leads; the big one's longer inputs stay out
    assert [len(e.ids) for e in b.inputs()] == [3, 4]
    assert run(q, b) == [small] and small.values()[:, 1].tolist() == [3, 4]
    assert q.next_batch().parts[0][0] is big  # alone again: it leads every batch


def test_others_fill_the_rows_of_the_lead_with_inputs_no_longer_than_its_own():
    q = FairQueue(max_rows=6, max_tokens=10_000)
    big, a, b = job("big", [10] * 20), job("a", [2, 9, 30]), job("b", [5, 40])
    for j in (big, a, b):
        q.add(j)
    first = q.next_batch()  # big leads at width 10 and fills its six rows alone
    assert [p[0].request_id for p in first.parts] == ["big"]
    run(q, first)
    second = q.next_batch()  # a leads (width 30); b's 5 and big's 10s join, b's 40 would widen it
    assert [(p[0].request_id, p[2] - p[1]) for p in second.parts] == [("a", 3), ("b", 1), ("big", 2)]
    assert max(len(e.ids) for e in second.inputs()) == 30
    assert run(q, second) == [a] and a.shared == 3
    third = q.next_batch()  # b leads with its 40: big's 10s fill the rest
    assert [(p[0].request_id, p[2] - p[1]) for p in third.parts] == [("b", 1), ("big", 5)]


def test_the_lead_goes_round_between_jobs_that_fill_whole_batches():
    q = FairQueue(max_rows=2, max_tokens=10_000)
    for rid in "abc":
        q.add(job(rid, [5] * 6))
    leads = []
    while (b := q.next_batch()) is not None:
        leads.append(b.parts[0][0].request_id)
        assert len(b.parts) == 1  # each fills the batch alone
        run(q, b)
    assert leads == list("abcabcabc")


def test_cancel_drops_what_has_not_run_and_the_others_go_on():
    q = FairQueue(max_rows=2, max_tokens=10_000)
    a, b = job("a", [5] * 10), job("b", [5] * 2)
    q.add(a)
    q.add(b)
    run(q, q.next_batch())
    assert a.taken == 2 and q.cancel("a") is a and q.cancel("a") is None
    batch = q.next_batch()
    assert [p[0].request_id for p in batch.parts] == ["b"]
    assert run(q, batch) == [b] and q.next_batch() is None


def test_score_and_embed_jobs_never_share_a_batch():
    q = FairQueue(max_rows=8, max_tokens=10_000)
    q.add(job("e", [3, 3]))
    q.add(job("s", [4, 4], op="score"))
    first = q.next_batch()
    assert first.op == "embed" and {p[0].request_id for p in first.parts} == {"e"}
    run(q, first)
    second = q.next_batch()
    assert second.op == "score" and {p[0].request_id for p in second.parts} == {"s"}


def test_a_failed_batch_fails_its_jobs_only():
    q = FairQueue(max_rows=2, max_tokens=10_000)
    a, b, c = job("a", [1]), job("b", [1]), job("c", [1])
    for j in (a, b, c):
        q.add(j)
    batch = q.next_batch()
    assert q.fail(batch) == [a, b] and list(q.jobs) == [c]
