"""Continuous batching: which tokens of which requests go into the next llama_decode.

Every step spends a token budget (``n_batch``): first one token for each request that is
decoding, then chunks of prompts still being computed (chunked prefill), then newly
admitted requests. A long prompt therefore never freezes streams that are running.
KV cells are accounted per request; when a step would need more cells than are free, the
most recently admitted request is preempted (its cells released, back to the head of the
queue, recomputed later: its client only sees a pause).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from runtime.engine.request import Request, RequestStatus


@dataclass(slots=True)
class SchedulerConfig:
    max_running: int = 4
    token_budget: int = 512
    kv_capacity: int = 8192


@dataclass(slots=True)
class ScheduledChunk:
    """Tokens ``request.tokens[start:end]`` are computed this step."""

    request: Request
    start: int
    end: int

    @property
    def samples(self) -> bool:
        """Whether this chunk reaches the end of the known tokens, so a token is sampled."""
        return self.end == len(self.request.tokens)


class Scheduler:
    def __init__(self, config: SchedulerConfig, n_seq: int, release_seq: Callable[[int], None]):
        self.config = config
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # in order of admission
        self._free_seqs = list(range(n_seq - 1, -1, -1))
        self._release_seq = release_seq
        self.num_preemptions = 0

    # -- queue ------------------------------------------------------------------------
    def add(self, request: Request) -> None:
        request.status = RequestStatus.WAITING
        self.waiting.append(request)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def used_cells(self) -> int:
        return sum(r.num_computed for r in self.running)

    def remove(self, request: Request) -> None:
        """Take a request out (finished or cancelled) and release its cells at once."""
        if request in self.running:
            self.running.remove(request)
            self._release(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        request.status = RequestStatus.FINISHED

    def _release(self, request: Request) -> None:
        if request.seq_id is not None:
            self._release_seq(request.seq_id)
            self._free_seqs.append(request.seq_id)
            request.seq_id = None
        request.num_computed = 0

    def preempt(self, request: Request) -> None:
        """Free a running request's cells and put it back at the head of the queue."""
        self.running.remove(request)
        self._release(request)
        request.status = RequestStatus.WAITING
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)

    # -- planning ---------------------------------------------------------------------
    def schedule(self) -> list[ScheduledChunk]:
        budget = self.config.token_budget
        free = self.config.kv_capacity - self.used_cells
        chunks: list[ScheduledChunk] = []
        # Decoding requests first (one token each), then unfinished prompts, oldest first.
        order = sorted(self.running, key=lambda r: r.num_pending > 1)
        for request in order:
            if request not in self.running or budget == 0:
                continue
            n = min(request.num_pending, budget)
            while free < n and request in self.running:
                victim = self.running[-1]
                free += victim.num_computed
                self.preempt(victim)
            if request not in self.running:
                continue
            chunks.append(ScheduledChunk(request, request.num_computed, request.num_computed + n))
            budget -= n
            free -= n
        while self.waiting and budget > 0 and self._free_seqs:
            if len(self.running) >= self.config.max_running:
                break
            request = self.waiting[0]
            n = min(request.num_pending, budget)
            # Admit only when the whole remaining prompt fits beside one more token for
            # each running request; an empty engine always admits (the request was
            # validated to fit the context on its own).
            if self.running and free - len(self.running) < request.num_pending:
                break
            self.waiting.popleft()
            request.seq_id = self._free_seqs.pop()
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            chunks.append(ScheduledChunk(request, 0, n))
            budget -= n
            free -= n
        return chunks
