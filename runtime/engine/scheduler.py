"""Continuous batching: which tokens of which requests go into the next llama_decode.

The queue is fair between clients (``Request.client``): a request goes before every waiting
request of a client that already has more in the engine, and a client with nothing running
starts at once on a place beyond ``max_running`` (``add``, ``_room``).

Every step spends a token budget (``n_batch``): first one token for each request that is
decoding, then chunks of prompts still being computed (chunked prefill), then newly
admitted requests, which start after their longest cached prefix. A prefill chunk may end
early, on a checkpoint position of a model whose memory needs checkpoints (``checkpoints.py``). KV blocks come from the
KV cache manager; when a step needs more blocks than are free (after evicting unreferenced
cache), the most recently admitted request is preempted (its blocks released, back to the
head of the queue, recomputed later: its client only sees a pause).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from runtime.engine.kv_cache_manager import KVCacheManager
from runtime.engine.request import Request, RequestStatus


@dataclass(slots=True)
class SchedulerConfig:
    max_running: int = 4
    token_budget: int = 512
    #: prompt tokens per step of a request that wants logits at every position (prompt
    #: logprobs): each is a vocabulary-wide float row in llama.cpp's output buffer
    max_output_rows: int = 512


@dataclass(slots=True)
class ScheduledChunk:
    """Tokens ``request.tokens[start:end]`` are computed this step."""

    request: Request
    start: int
    end: int
    #: drafted tokens to verify after ``end`` (speculative decoding); slots are reserved
    k: int = 0

    @property
    def samples(self) -> bool:
        """Whether this chunk reaches the end of the known tokens, so a token is sampled."""
        return self.end == len(self.request.tokens)


#: ``(request, n_decoding) -> K``: drafts to reserve KV slots for after a decoding request's
#: token (speculative decoding). A query: planning a step changes nothing but the scheduler's
#: own lists and the KV blocks.
Lookahead = Callable[[Request, int], int]


class Scheduler:
    def __init__(self, config: SchedulerConfig, kv: KVCacheManager, lookahead: Lookahead | None = None) -> None:
        self.config = config
        self.kv = kv
        self.lookahead = lookahead
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # in order of admission
        self.num_preemptions = 0

    # -- queue ------------------------------------------------------------------------
    def add(self, request: Request) -> None:
        """Queue a request in fair order between clients: its ``turn`` is how many of its client's
        requests the engine already holds, and it goes before every waiting request of a later
        turn (after its own client's): a client with twelve requests queued has the next place
        after one of them, not after all twelve. Requests of one client keep their order."""
        request.status = RequestStatus.WAITING
        who = request.client
        mine = [i for i, r in enumerate(self.waiting) if r.client == who]
        request.turn = turn = sum(1 for r in self.running if r.client == who) + len(mine)
        at = next((i for i, r in enumerate(self.waiting) if r.turn > turn), len(self.waiting))
        self.waiting.insert(max(at, mine[-1] + 1 if mine else 0), request)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def used_cells(self) -> int:
        """KV cells in use by running requests (the tokens they have computed)."""
        return sum(r.num_computed for r in self.running)

    def remove(self, request: Request, keep_cache: bool = True, defer: bool = False) -> None:
        """Take a request out (finished or cancelled); its full blocks stay as prefix cache
        unless ``keep_cache`` is False (a request that failed: its cells are not trusted).
        ``defer``: its blocks are released at the next ``KVCacheManager.flush``."""
        if request in self.running:
            self.running.remove(request)
            self.kv.free(request, keep_cache=keep_cache, defer=defer and keep_cache)
        elif request in self.waiting:
            self.waiting.remove(request)
        request.status = RequestStatus.FINISHED

    def preempt(self, request: Request) -> None:
        """Free a running request's blocks and put it back at the head of the queue."""
        self.running.remove(request)
        self.kv.free(request, keep_cache=False)
        request.num_computed = 0
        request.status = RequestStatus.WAITING
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)

    # -- planning ---------------------------------------------------------------------
    def schedule(self) -> list[ScheduledChunk]:
        budget = self.config.token_budget
        chunks: list[ScheduledChunk] = []
        n_decoding = sum(1 for r in self.running if r.num_pending == 1)
        # Decoding requests first (one token each), then unfinished prompts, oldest first.
        for request in sorted(self.running, key=lambda r: r.num_pending > 1):
            if request not in self.running or budget <= 0:
                continue
            n = self._chunk(request, budget)
            k = 0
            if n == 1 and self.lookahead is not None:
                k = max(0, min(self.lookahead(request, n_decoding), budget - 1))
            while request in self.running and not self.kv.allocate_slots(request, n + k):
                if k:
                    k = 0  # no room to draft: decode one token rather than preempt
                    continue
                victim = self.running[-1]
                self.preempt(victim)
                for c in [c for c in chunks if c.request is victim]:
                    chunks.remove(c)
                    budget += c.end - c.start + c.k
            if request not in self.running:
                continue
            chunks.append(ScheduledChunk(request, request.num_computed, request.num_computed + n, k))
            budget -= n + k
        while self.waiting and budget > 0 and len(self.running) < self._room(self.waiting[0]):
            chunk = self._admit(self.waiting[0], budget)
            if chunk is None:
                break
            chunks.append(chunk)
            budget -= chunk.end - chunk.start
        return chunks

    def _room(self, head: Request) -> int:
        """How many requests may run once ``head`` is admitted: ``max_running``, and one place more
        for a client that has nothing running (a guest: one at a time), so that one client's long
        replies on every place never hold another client's short request back until one ends.
        The place exists where a sequence id is free (a prefix-cache holder gives its id way); a
        recurrent model has none beyond ``max_running``, and its guest waits as before."""
        limit = self.config.max_running
        if len(self.running) >= limit and all(r.client != head.client for r in self.running):
            return limit + 1
        return limit

    def _chunk(self, request: Request, budget: int) -> int:
        n = min(request.num_pending, budget)
        if request.wants_prompt_rows:
            n = min(n, self.config.max_output_rows)
        n = self.kv.chunk(request, n)
        if request.media is not None:
            # text stops at a medium; a medium's rest goes whole when the model attends across it
            n = request.media.clip(request.num_computed, n)
        return n

    def _admit(self, request: Request, budget: int) -> ScheduledChunk | None:
        parent = request.follows
        if parent is not None and parent.status is RequestStatus.RUNNING and parent.num_computed < parent.prompt_len:
            return None  # its prompt's blocks are being computed: wait and share them
        hit = self.kv.get_computed_blocks(request)
        # Admit only when the whole remaining prompt fits beside one more block for each
        # running request; an empty engine always tries (the request fits the context).
        need = self.kv.blocks_needed(request, hit) + len(self.running)
        if self.running and self.kv.num_free_blocks < need:
            return None
        seq = self.kv.acquire_seq(hit)
        if seq is None:
            return None
        if not hit.intact:
            # the only holder that could give way held this prefix: what is left of it
            hit = self.kv.get_computed_blocks(request)
            if self.running and self.kv.num_free_blocks < self.kv.blocks_needed(request, hit) + len(self.running):
                self.kv.release_unused_seq(seq)
                return None
        self.waiting.popleft()
        self.kv.admit(request, seq, hit)
        n = self._chunk(request, budget)
        if not self.kv.allocate_slots(request, n):
            self.kv.free(request, keep_cache=False)
            request.num_computed = 0
            self.waiting.appendleft(request)
            return None
        request.status = RequestStatus.RUNNING
        self.running.append(request)
        return ScheduledChunk(request, request.num_computed, request.num_computed + n)
