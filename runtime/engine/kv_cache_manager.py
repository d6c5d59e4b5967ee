"""Per-request block tables over llama.cpp's unified KV pool, with prefix caching.

The pool (``block_pool.py``) decides; this module carries the decisions out on llama.cpp
through the backend's memory API:

- a running request owns the cells of its sequence id;
- a prefix hit copies cached blocks into the new sequence: ``seq_cp(src, dst, p0, p1)``
  only adds ``dst`` to the owners of those cells (zero-copy), runs of blocks held by the
  same sequence in one call;
- a finished request's sequence becomes a *holder* of its full blocks (duplicates and
  the partial tail are removed with ``seq_rm``); evicting a cached block removes its cells
  from its holder, and a holder with no blocks frees its sequence id;
- sequence ids are bounded (running slots + holders <= n_seq_max): when none is free, the
  least recently used holder is dropped.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from runtime.engine.block_pool import Block, BlockPool
from runtime.engine.request import Request
from runtime.kernels.block_hash import ROOT, hash_block


@dataclass(slots=True)
class KVStats:
    block_size: int
    blocks_total: int
    blocks_used: int
    blocks_cached: int
    prefix_hit_tokens: int
    prompt_tokens: int
    evictions: int
    holders: int


class KVCacheManager:
    def __init__(self, memory, num_blocks: int, block_size: int, n_seq: int,
                 prefix_cache: bool = True, cache_fraction: float = 1.0, n_swa: int = 0) -> None:
        self.memory = memory  # the backend: seq_rm / seq_cp / seq_pos_min
        self.block_size = block_size
        self.pool = BlockPool(num_blocks, block_size, on_evict=self._on_evict)
        self.prefix_cache = prefix_cache
        self.cache_keep = int(num_blocks * cache_fraction)
        self.n_swa = n_swa
        self.tables: dict[str, list[Block]] = {}
        self._free_seqs = list(range(n_seq - 1, -1, -1))
        self._held: dict[int, int] = {}  # holder seq -> blocks it holds
        self._holders: OrderedDict[int, None] = OrderedDict()  # LRU order of idle holders
        self.prefix_hit_tokens = 0
        self.prompt_tokens = 0

    # -- sequence ids -----------------------------------------------------------------
    def acquire_seq(self) -> int | None:
        """A free sequence id; drops the least recently used holder when none is free."""
        if not self._free_seqs and self._holders:
            self._drop_holder(next(iter(self._holders)))
        return self._free_seqs.pop() if self._free_seqs else None

    def _drop_holder(self, seq: int) -> None:
        for block in self.pool.blocks:
            if seq in block.seqs:
                self._leave(block, seq)
        self.memory.seq_rm(seq, 0, None)
        self._release_seq(seq)

    def _release_seq(self, seq: int) -> None:
        self._held.pop(seq, None)
        self._holders.pop(seq, None)
        self._free_seqs.append(seq)

    def _leave(self, block: Block, seq: int) -> None:
        """``seq`` stops holding ``block``; a cached block nobody holds loses its hash."""
        block.seqs.remove(seq)
        if not block.seqs and block.hash is not None:
            if block.ref_count == 0:
                self.pool.num_cached_free -= 1
            self.pool.uncache(block)

    def _on_evict(self, block: Block) -> None:
        b = self.block_size
        for seq in list(block.seqs):
            self.memory.seq_rm(seq, block.index * b, (block.index + 1) * b)
            block.seqs.remove(seq)
            if seq in self._held:
                self._held[seq] -= 1
                if self._held[seq] == 0:
                    self._release_seq(seq)

    # -- admission --------------------------------------------------------------------
    def get_computed_blocks(self, request: Request) -> list[Block]:
        """The longest cached prefix of the request's tokens (at least one token stays to compute)."""
        if not self.prefix_cache:
            return []
        b = self.block_size
        hits: list[Block] = []
        parent = ROOT
        limit = (len(request.tokens) - 1) // b
        for i in range(limit):
            chunk = request.tokens[i * b:(i + 1) * b]
            parent = hash_block(parent, chunk)
            block = self.pool.lookup(parent, chunk)
            if block is None or not block.seqs:
                break
            hits.append(block)
        return hits

    def blocks_needed(self, request: Request, hits: list[Block], n_new: int) -> int:
        b = self.block_size
        total = len(hits) * b + n_new
        return -(-total // b) - len(hits)

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free

    def admit(self, request: Request, seq: int, hits: list[Block]) -> None:
        """Give ``request`` its sequence and the cached prefix ``hits`` (copied zero-copy)."""
        request.seq_id = seq
        self.pool.touch(hits)
        self._copy_prefix(hits, seq)
        n = len(hits) * self.block_size
        if hits and self.n_swa and not self._swa_intact(seq, n):
            # The sliding-window cells of that prefix are gone: recompute, never guess.
            self.memory.seq_rm(seq, 0, None)
            for block in hits:
                block.seqs.remove(seq)
            self.pool.free(hits)
            hits, n = [], 0
        self.tables[request.request_id] = list(hits)
        request.num_computed = n
        if request.num_preemptions == 0:
            request.cached_tokens = n
            self.prefix_hit_tokens += n
            self.prompt_tokens += request.prompt_len

    def _copy_prefix(self, hits: list[Block], seq: int) -> None:
        b = self.block_size
        start = 0
        for i in range(1, len(hits) + 1):
            if i == len(hits) or hits[i].seqs[0] != hits[start].seqs[0]:
                self.memory.seq_cp(hits[start].seqs[0], seq, start * b, i * b)
                start = i
        for block in hits:
            self.touch_holder(block.seqs[0])
            block.seqs.append(seq)

    def _swa_intact(self, seq: int, n: int) -> bool:
        pos_min = self.memory.seq_pos_min(seq)
        return pos_min is not None and pos_min <= max(0, n - self.n_swa)

    def allocate_slots(self, request: Request, n_new: int) -> bool:
        """Blocks for ``n_new`` more tokens after ``num_computed``; False if there is no room."""
        table = self.tables[request.request_id]
        need = -(-(request.num_computed + n_new) // self.block_size) - len(table)
        if need <= 0:
            return True
        blocks = self.pool.allocate(need)
        if blocks is None:
            return False
        for block in blocks:
            block.seqs.append(request.seq_id)
        table.extend(blocks)
        return True

    def commit(self, request: Request) -> None:
        """Register the request's newly full blocks in the prefix cache."""
        if not self.prefix_cache:
            return
        b = self.block_size
        table = self.tables[request.request_id]
        full = request.num_computed // b
        parent = table[request.num_hashed - 1].hash if request.num_hashed else ROOT
        for i in range(request.num_hashed, full):
            if parent is None:  # an earlier block was a duplicate: the chain stops here
                break
            tokens = request.tokens[i * b:(i + 1) * b]
            h = hash_block(parent, tokens)
            block = table[i]
            if not self.pool.cache(block, h, tokens, i):
                parent = None
                continue
            parent = h
        request.num_hashed = full

    # -- release ----------------------------------------------------------------------
    def free(self, request: Request, keep_cache: bool) -> None:
        """Release a request's blocks. With ``keep_cache`` its sequence holds its cached blocks."""
        table = self.tables.pop(request.request_id, [])
        seq = request.seq_id
        request.seq_id, request.num_hashed = None, 0
        if seq is None:
            return
        held = 0
        for block in table:
            keep = keep_cache and block.hash is not None and block.seqs == [seq]
            if keep:
                held += 1
            else:
                self._leave(block, seq)
        if held:
            # Drop the cells of everything this sequence does not keep, in one pass per block.
            self._trim_seq(seq, table)
            self._held[seq] = held
            self._holders[seq] = None
        else:
            self.memory.seq_rm(seq, 0, None)
            self._free_seqs.append(seq)
        self.pool.free(table)
        if keep_cache:
            self.pool.trim_cache(self.cache_keep)

    def _trim_seq(self, seq: int, table: list[Block]) -> None:
        b = self.block_size
        for i, block in enumerate(table):
            if seq not in block.seqs:
                self.memory.seq_rm(seq, i * b, (i + 1) * b)
        self.memory.seq_rm(seq, len(table) * b, None)

    def touch_holder(self, seq: int) -> None:
        if seq in self._holders:
            self._holders.move_to_end(seq)

    def stats(self) -> KVStats:
        p = self.pool
        return KVStats(self.block_size, p.num_blocks, p.num_used, p.num_cached,
                       self.prefix_hit_tokens, self.prompt_tokens, p.evictions, len(self._holders))
