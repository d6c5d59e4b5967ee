"""The embedding worker's jobs and how their inputs share batches fairly (``FairQueue``).

A job's inputs are tokenized when it arrives, sorted shortest first (less padding) and run a
batch at a time: never the whole job at once, so a job of 2,048 long inputs holds the worker
for one batch, not for minutes. Each batch starts with the job whose turn it is and fills its
remaining rows from the jobs behind it, with inputs no longer than its own longest (so they add
rows, never padding: a short request's batch stays short); the job that led the last batch
gives the lead to the next one. So a request that arrives while a huge one runs is in the very
next batch, and requests that wait together run together. Between batches the worker reads its pipe: a
cancelled job's inputs that have not run are dropped there.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from runtime.engine.embed_messages import EmbedJob


@dataclass(slots=True, eq=False)
class ActiveJob:
    """One job in the worker: its tokenized inputs, shortest first, and their results so far."""

    job: EmbedJob
    encoded: list  #: the backend's ``Encoded`` per input, shortest first
    order: list[int]  #: ``encoded[k]`` is the job's input ``order[k]``
    n_tokens: int
    results: list = field(default_factory=list)  #: per entry of ``encoded``, as batches finish
    taken: int = 0  #: entries handed to batches
    finished: int = 0  #: entries whose results are in
    shared: int = 1  #: the most jobs that ran in one batch with this one (1: alone)

    @classmethod
    def of(cls, job: EmbedJob, encoded: list) -> "ActiveJob":
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].ids))
        return cls(job, [encoded[i] for i in order], order, sum(len(e.ids) for e in encoded),
                   [None] * len(encoded))

    @property
    def request_id(self) -> str:
        return self.job.request_id

    @property
    def complete(self) -> bool:
        return self.finished == len(self.encoded)

    def values(self) -> np.ndarray:
        """The results in the job's input order: [n, dim] vectors or [n] scores, float32."""
        out = np.empty((len(self.results), *np.shape(self.results[0])), dtype=np.float32)
        out[self.order] = np.asarray(self.results, dtype=np.float32)
        return out


@dataclass(slots=True)
class Batch:
    op: str  #: embed | score: one kind per batch
    parts: list[tuple[ActiveJob, int, int]]  #: (job, start, stop) slices of the jobs' ``encoded``

    def inputs(self) -> list:
        return [e for job, a, b in self.parts for e in job.encoded[a:b]]


class FairQueue:
    """The jobs waiting in the worker, and the next batch to run (see the module's docstring).

    A batch holds at most ``max_rows`` inputs and ``max_tokens`` padded tokens (rows times the
    longest); one input always fits, however long."""

    def __init__(self, max_rows: int, max_tokens: int) -> None:
        self.max_rows, self.max_tokens = max(1, max_rows), max(1, max_tokens)
        self.jobs: deque[ActiveJob] = deque()
        self._last: ActiveJob | None = None  #: the job that led the last batch

    def __len__(self) -> int:
        return len(self.jobs)

    def add(self, job: ActiveJob) -> None:
        self.jobs.append(job)

    def cancel(self, request_id: str) -> ActiveJob | None:
        """Drop the job's inputs that have not run; the job, or None when it is not here."""
        for j in self.jobs:
            if j.request_id == request_id:
                self.jobs.remove(j)
                return j
        return None

    def next_batch(self) -> Batch | None:
        """The inputs to run next, or None when no job waits. Call ``finish`` or ``fail`` with
        it before asking for the next one."""
        if not self.jobs:
            return None
        if len(self.jobs) > 1 and self.jobs[0] is self._last:
            self.jobs.rotate(-1)  # the lead goes round: no job leads two batches in a row while others wait
        head = self._last = self.jobs[0]
        op, parts, rows, width = head.job.op, [], 0, 0
        for j in self.jobs:
            if j.job.op != op:
                continue
            start = j.taken
            while j.taken < len(j.encoded) and rows < self.max_rows:
                n = len(j.encoded[j.taken].ids)
                if j is not head and n > width:
                    break  # the others fill rows at the lead's width: they never make its batch slower per row
                w = max(width, n)
                if rows and (rows + 1) * w > self.max_tokens:
                    break
                j.taken, rows, width = j.taken + 1, rows + 1, w
            if j.taken > start:
                parts.append((j, start, j.taken))
            if rows >= self.max_rows or (rows + 1) * width > self.max_tokens:
                break  # the batch is full
        for j, _, _ in parts:
            j.shared = max(j.shared, len(parts))
        return Batch(op, parts)

    def finish(self, batch: Batch, out: np.ndarray) -> list[ActiveJob]:
        """Store the batch's results (``out``: one row per input, in ``batch.inputs()`` order);
        returns the jobs now complete, which leave the queue."""
        done, k = [], 0
        for j, a, b in batch.parts:
            j.results[a:b] = list(out[k:k + b - a])
            k += b - a
            j.finished += b - a
            if j.complete:
                self._remove(j)
                done.append(j)
        return done

    def fail(self, batch: Batch) -> list[ActiveJob]:
        """The batch failed: its jobs leave the queue (each is answered with the error)."""
        jobs = [j for j, _, _ in batch.parts]
        for j in jobs:
            self._remove(j)
        return jobs

    def _remove(self, job: ActiveJob) -> None:
        if job in self.jobs:
            self.jobs.remove(job)
