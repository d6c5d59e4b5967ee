"""An agent's sessions in several directories, on a pool of cells without a model.

A coding agent's requests from one directory share its tools and instructions, then each
session goes its own way. A new session must read that shared prefix back whatever came
between: other directories' sessions filling the KV pool, the host tier and the disk tier,
and workers ended and started again (a model unloaded when idle, another model's worker
writing into the same folder). The pool (``cell_pool.py``) refuses a saved state that does not
fit, as llama.cpp does; every computed chunk is checked against the request's tokens, so a
restore that put wrong cells in would fail the test. The tests run once as a plain attention
model and once as one whose memory needs checkpoints (their bookkeeping: the pool has no
sliding window; ``test_agent_sessions.py`` runs Gemma 3).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.engine.checkpoints import MemoryLayout
from runtime.engine.disk_cache import DiskCache
from runtime.engine.kv_cache_manager import KVCacheManager
from runtime.engine.request import Request
from runtime.engine.scheduler import Scheduler, SchedulerConfig
from runtime.kernels.block_hash import hash_blocks
from runtime.sampling_params import SamplingParams
from tests.engine.cell_pool import CellPool

B = 16
LAYOUT, OTHER_MODEL = bytes(range(32)), bytes(range(1, 33))
OUTPUT = 1 << 20  # sampled tokens: ids no prompt has


class Worker:
    """One model's worker as the prefix cache sees it: its pool, host tier and disk tier."""

    def __init__(self, folder: Path, n_ctx: int, host_bytes: int, disk_bytes: int, layout: bytes = LAYOUT,
                 checkpoints: bool = False) -> None:
        self.pool = CellPool(n_ctx)
        self.disk = DiskCache(folder, disk_bytes, layout)
        self.kv = KVCacheManager(self.pool, n_ctx // B, B, 6, cache_fraction=0.0, host_bytes=host_bytes,
                                 layout=MemoryLayout(partial=checkpoints), disk=self.disk)
        self.scheduler = Scheduler(SchedulerConfig(2, 256), self.kv)

    def run(self, rid: str, prompt: list[int], n_out: int = 3) -> Request:
        """One request to its end; returns it (``cached_tokens``: what it read from cache)."""
        request = Request(rid, len(prompt), list(prompt), SamplingParams(temperature=0), n_out)
        self.scheduler.add(request)
        while self.scheduler.has_work():
            for c in self.scheduler.schedule():
                r = c.request
                assert r.seq_id is not None
                self.pool.decode(r.seq_id, r.tokens[c.start:c.end], c.start)
                assert self.pool.tokens(r.seq_id) == r.tokens[:c.end]  # what a restore put in is the prompt's
                r.num_computed = c.end
                self.kv.commit(r)
                if c.samples:
                    r.tokens.append(OUTPUT + r.num_output)
                    if r.num_output >= r.max_tokens:
                        self.scheduler.remove(r)
        return request

    def close(self) -> None:
        self.disk.close()  # the worker ends: its writes are done, its memory is gone


def tokens(seed: int, n: int) -> list[int]:
    """``n`` distinct-looking token ids of their own for each seed."""
    return [(seed * 7919 + i * 104729) % 50_000 + 1 for i in range(n)]


def prompt(directory: int, session: int, turn: int = 0) -> list[int]:
    """The directory's tools and instructions (41 blocks and a bit), then the session's own turns."""
    return tokens(directory, 41 * B + 5) + tokens(1000 + 10 * directory + session, 40 + 30 * turn)


SHARED = 41 * B + 5


@pytest.mark.parametrize("checkpoints", [False, True], ids=["attention", "checkpoints"])
def test_a_new_session_reads_the_shared_prefix_while_another_conversation_holds_the_pool(tmp_path, checkpoints):
    """The reported miss: the previous request (another directory) still held its cells on the
    device when a new session of the first directory came; the saved state that held the
    shared prefix was loaded whole before its trim, did not fit beside them, was refused, and
    the session recomputed all of it (0 of 661 shared tokens; 99% on its next request)."""
    w = Worker(tmp_path, n_ctx=1024, host_bytes=1 << 20, disk_bytes=1 << 20, checkpoints=checkpoints)
    try:
        w.run("a/0", prompt(0, 0))
        w.run("b/0", prompt(1, 0))  # idle now, its holder keeps its ~700 cells
        new = w.run("a/1", prompt(0, 1))
    finally:
        w.close()
    # with checkpoints: up to the one every 32 blocks (the first session to part saves one where it parts)
    assert new.cached_tokens == (32 * B if checkpoints else SHARED // B * B), new.cached_tokens
    assert w.pool.loads_refused == 0


@pytest.mark.parametrize("checkpoints", [False, True], ids=["attention", "checkpoints"])
def test_sessions_in_three_directories_with_workers_ending_then_a_new_session_in_the_first(tmp_path, checkpoints):
    """3 directories x 3 sessions of 2 turns, grouped by directory, each directory's sessions in
    a new worker; the host tier holds about one conversation's state and the disk tier (shared
    with another model, whose worker writes into it too) about seven: the first directory's
    states are the least recently used, and go. A new session there still reads its shared
    prefix: its state, saved where the second session parted from the first, goes last (three
    directories' shared prefixes keep within half the disk tier). With checkpoints, it reads it
    all, not only up to the last checkpoint every 32 blocks: one is saved where sessions part."""
    one = len(prompt(0, 0, 1)) * 16  # bytes of one conversation's saved state (cell_pool.py)

    def worker() -> Worker:
        return Worker(tmp_path, n_ctx=1024, host_bytes=one + one // 2, disk_bytes=7 * one, checkpoints=checkpoints)

    cached: dict[tuple[int, int, int], int] = {}
    for d in range(3):
        w = worker()
        try:
            for s in range(3):
                for t in range(2):
                    cached[d, s, t] = w.run(f"{d}/{s}/{t}", prompt(d, s, t)).cached_tokens
        finally:
            w.close()
        other = Worker(tmp_path, n_ctx=1024, host_bytes=one, disk_bytes=7 * one, layout=OTHER_MODEL)
        try:  # another model's requests between the directories: its files take room too
            other.run(f"other/{d}", tokens(99 + d, 30 * B))
        finally:
            other.close()
    w = worker()
    try:
        # of the first directory, only the shared prefix is left on disk
        assert [w.disk.reach(hash_blocks(prompt(0, s, 1), B)) for s in range(3)] == [SHARED // B] * 3
        new = w.run("0/new", prompt(0, 3)).cached_tokens
        again = w.run("0/new/1", prompt(0, 3, 1)).cached_tokens
    finally:
        w.close()
    assert all(cached[d, s, 1] >= len(prompt(d, s)) - B for d in range(3) for s in range(3)), cached
    assert all(cached[d, s, 0] >= SHARED - B for d in range(3) for s in (1, 2) if not checkpoints or s == 2), cached
    assert new >= SHARED - B, (new, SHARED)
    assert again >= len(prompt(0, 3)) - B


def test_a_state_removed_after_the_lookup_falls_back_to_the_checkpoint_below(tmp_path):
    """A worker's index still lists a state file that another model's writer removed: the
    checkpoint it would have served is out of reach, the next one below it that what is left
    on disk serves is restored (the shared prefix's), not nothing."""
    w = Worker(tmp_path, n_ctx=1024, host_bytes=1 << 20, disk_bytes=1 << 20, checkpoints=True)
    try:
        w.run("a/0", prompt(0, 0))  # checkpoints at 32 blocks and at its prompt's end (43)
        w.run("other", prompt(1, 0))  # takes a/0's cells off the device
        assert w.run("b/0", prompt(0, 1)).cached_tokens == 32 * B  # parts at 41: saved there
    finally:
        w.close()
    w = Worker(tmp_path, n_ctx=1024, host_bytes=1 << 20, disk_bytes=1 << 20, checkpoints=True)
    try:
        end = hash_blocks(prompt(0, 0), B)[-1]
        next(tmp_path.glob(f"*-s-{end:016x}.kv")).unlink()  # a/0's state
        assert w.run("a/1", prompt(0, 0, 1)).cached_tokens == SHARED // B * B
    finally:
        w.close()


@pytest.mark.parametrize("disk", [True, False], ids=["disk tier", "memory only"])
def test_a_checkpoint_inside_a_prompt_waits_on_disk_and_comes_back_when_a_session_parts_there(tmp_path, disk):
    """A prompt's last checkpoint stays in memory (its next turn starts there); the ones every 32
    blocks inside it are kept in case a later prompt parts there, and where a disk tier exists
    they wait there alone: four 1,200-token requests to Gemma 3 kept 12 checkpoints of 7.9 MB in
    memory, 1.18x llama-server's memory. A new session parting inside the prompt still reads
    it up to that checkpoint, from disk."""
    w = Worker(tmp_path, n_ctx=1024, host_bytes=1 << 20, disk_bytes=1 << 20, checkpoints=True)
    if not disk:
        w.kv = KVCacheManager(w.pool, 1024 // B, B, 6, cache_fraction=0.0, host_bytes=1 << 20,
                              layout=MemoryLayout(partial=True), disk=None)
        w.scheduler = Scheduler(SchedulerConfig(2, 256), w.kv)
    try:
        first = w.run("a/0", prompt(0, 0))
        hashes = hash_blocks(first.tokens[:len(first.tokens) // B * B], B)
        inside, last = hashes[32 - 1], hashes[(first.prompt_len - 1) // B - 1]
        host = w.kv.host
        assert host is not None and host.has_checkpoint(last)
        assert host.has_checkpoint(inside) is not disk  # in memory only without a disk tier
        assert host.has_checkpoint(inside, 32)
        w.run("b/0", prompt(1, 0))
        new = w.run("a/1", prompt(0, 1))
    finally:
        w.close()
    assert new.cached_tokens == 32 * B, new.cached_tokens
