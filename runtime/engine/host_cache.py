"""The host-memory tier of the prefix cache: saved sequence states and checkpoints in RAM.

Cached tokens held on the device slow every decode in a unified KV pool, so the device
keeps a bounded cache; when a holder sequence loses its blocks, its cells are saved with
``llama_state_seq_get_data`` (about 29 ms for 2,000 SmolLM2 tokens here) and kept here
within ``capacity_bytes``. A later prompt with that prefix restores them
(``llama_state_seq_set_data``, about 5 ms) instead of recomputing (seconds).

Checkpoints (``checkpoints.py``) share the budget: each is the partial state
(sliding-window cells, recurrent state) of a prefix that ends at a block boundary, keyed
by that block's chained hash. Eviction goes in three ranks, least recently used first
within each: whole states, then checkpoints whose prefix one request's prompt held, then
those whose prefix several requests' prompts held (``seen``). A state is the size of its
whole sequence (about 360 MB for a 19k-token Gemma 3 prompt), a checkpoint a few MB, and
a new session of an agent needs the checkpoints of the shared prefix (its tools and
instructions) more than the last session's states: in one LRU order the states of a few
requests pushed 32 of 41 checkpoints out. Each admitted prompt refreshes the checkpoints of
its prefixes deepest first, so within a rank the shallowest prefixes, which the most
conversations share, are the last to go.

A saved state whose blocks a newer state covers entirely (the next turn of the same
conversation) is dropped: lookups always find the newest, so it only took room.

With a disk tier (``disk_cache.py``) every entry is also written there, and a lookup that
memory cannot serve, or serves with a shorter prefix, reads it back.
"""

from __future__ import annotations

import builtins
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.engine.disk_cache import DiskCache

#: the default tier takes this share of the RAM available when the model has loaded,
#: within the floor and ceiling below (``--cache-ram`` overrides it)
RAM_SHARE = 0.25
MIN_BYTES = 256 << 20
MAX_BYTES = 16 << 30


def default_capacity(available: int) -> int:
    """The tier's size from what the machine can spare: ``RAM_SHARE`` of the available RAM
    (measured after the model loaded), at least ``MIN_BYTES`` unless less than twice that is
    available, at most ``MAX_BYTES``. Memory is taken only as entries are saved."""
    share = int(available * RAM_SHARE)
    floor = min(MIN_BYTES, available // 2)
    return max(0, min(MAX_BYTES, max(floor, share)))


@dataclass(slots=True, eq=False)
class HostEntry:
    hashes: list[int]  # chained hashes of the saved sequence's full blocks, in order
    data: bytes  # llama.cpp's saved state of that sequence
    #: a checkpoint: the partial state of exactly ``len(hashes)`` blocks (``hashes`` holds
    #: only the last block's hash)
    blocks: int = 0
    #: admitted requests whose prompt held this checkpoint's prefix (its own included)
    uses: int = 1
    #: read back from the disk tier by the latest lookup, and not yet counted as a hit
    from_disk: bool = False

    @property
    def is_checkpoint(self) -> bool:
        return self.blocks > 0


@dataclass(slots=True)
class TierCounters:
    """One kind of entry (whole states or checkpoints) in one tier."""

    entries: int = 0
    bytes: int = 0
    #: admitted requests that restored an entry of this tier, or asked it and found none
    hits: int = 0
    misses: int = 0
    hit_tokens: int = 0


@dataclass(slots=True)
class TierStats:
    """A tier's size and hit rate (``/hearth/stats``), states and checkpoints apart."""

    capacity_bytes: int
    states: TierCounters = field(default_factory=TierCounters)
    checkpoints: TierCounters = field(default_factory=TierCounters)
    #: hits over lookups of both kinds; None before the first lookup
    hit_rate: float | None = None
    #: the disk tier's writes given up because the writer was too far behind
    writes_skipped: int = 0


def hit_rate(states: TierCounters, checkpoints: TierCounters) -> float | None:
    lookups = states.hits + states.misses + checkpoints.hits + checkpoints.misses
    return round((states.hits + checkpoints.hits) / lookups, 4) if lookups else None


class HostCache:
    def __init__(self, capacity_bytes: int, disk: DiskCache | None = None) -> None:
        self.capacity_bytes = capacity_bytes
        self.disk = disk
        self._states: OrderedDict[int, HostEntry] = OrderedDict()  # last hash -> state, LRU first
        #: checkpoints by their last block's hash, LRU first: whose prefix one admitted prompt
        #: held, and several (``seen``)
        self._lone: OrderedDict[int, HostEntry] = OrderedDict()
        self._shared: OrderedDict[int, HostEntry] = OrderedDict()
        self._index: dict[int, tuple[HostEntry, int]] = {}  # block hash -> (state entry, blocks)
        self.state_bytes = 0
        self.checkpoint_bytes = 0
        #: prompt tokens restored from saved states and checkpoints (of this tier or the disk's)
        self.hit_tokens = 0
        #: lookups at admission, counted by the KV cache manager
        self.state_lookups = TierCounters()
        self.checkpoint_lookups = TierCounters()

    def __len__(self) -> int:
        return len(self._states) + self.num_checkpoints

    @property
    def bytes(self) -> int:
        return self.state_bytes + self.checkpoint_bytes

    @property
    def num_checkpoints(self) -> int:
        return len(self._lone) + len(self._shared)

    def entries(self) -> list[HostEntry]:
        """Every entry kept, in eviction order (the first goes first)."""
        return [*self._states.values(), *self._lone.values(), *self._shared.values()]

    # -- saving -----------------------------------------------------------------------
    def put(self, hashes: list[int], data: builtins.bytes) -> bool:
        """Keep a saved state of the blocks ``hashes``; False if it cannot fit in memory at all
        (the disk tier may still keep it)."""
        if hashes and self.disk is not None:
            self.disk.put_state(hashes, data)
        return self._put_state(hashes, data)

    def _put_state(self, hashes: list[int], data: builtins.bytes) -> bool:
        if not hashes or len(data) > self.capacity_bytes:
            return False
        known = self._index.get(hashes[-1])
        if known is not None and known[1] == len(hashes):
            self._states.move_to_end(known[0].hashes[-1])
            return True  # the same prefix is already saved (maybe inside a longer one)
        entry = HostEntry(list(hashes), data)
        displaced: set[HostEntry] = set()
        for i, h in enumerate(hashes):
            hit = self._index.get(h)
            if hit is not None:
                displaced.add(hit[0])
            self._index[h] = (entry, i + 1)  # equal hashes: equal prefixes, so the newest serves
        for old in displaced:
            if self._index[old.hashes[-1]][0] is entry:  # covered whole by the new state
                self._drop_state(old)
        self._states[hashes[-1]] = entry
        self.state_bytes += len(data)
        self._shrink(entry)
        return True

    def put_checkpoint(self, block_hash: int, blocks: int, data: builtins.bytes) -> bool:
        """Keep the partial state of the ``blocks``-block prefix whose last hash is ``block_hash``."""
        if blocks > 0 and self.disk is not None:
            self.disk.put_checkpoint(block_hash, blocks, data)
        return self._put_checkpoint(block_hash, blocks, data)

    def _put_checkpoint(self, block_hash: int, blocks: int, data: builtins.bytes) -> bool:
        if blocks < 1 or len(data) > self.capacity_bytes:
            return False
        if self.has_checkpoint(block_hash):
            return True
        entry = HostEntry([block_hash], data, blocks)
        self._lone[block_hash] = entry
        self.checkpoint_bytes += len(data)
        self._shrink(entry)
        return True

    # -- eviction ---------------------------------------------------------------------
    def _shrink(self, keep: HostEntry) -> None:
        """Evict until the budget holds: states, then lone checkpoints, then shared ones,
        least recently used first; never ``keep`` (the entry just saved, which fits alone)."""
        for rank in (self._states, self._lone, self._shared):
            while self.bytes > self.capacity_bytes and rank:
                victim = next(iter(rank.values()))
                if victim is keep:  # the newest of its rank: nothing older is left in it
                    break
                if victim.is_checkpoint:
                    self._drop_checkpoint(victim)
                else:
                    self._drop_state(victim)

    def _drop_state(self, entry: HostEntry) -> None:
        del self._states[entry.hashes[-1]]
        self.state_bytes -= len(entry.data)
        for h in entry.hashes:
            if self._index.get(h, (None,))[0] is entry:
                del self._index[h]

    def _drop_checkpoint(self, entry: HostEntry) -> None:
        rank = self._shared if entry.uses > 1 else self._lone
        del rank[entry.hashes[0]]
        self.checkpoint_bytes -= len(entry.data)

    # -- lookups ----------------------------------------------------------------------
    def has(self, hashes: list[int]) -> bool:
        """Whether a saved entry in memory already covers all of ``hashes``."""
        found = self._index.get(hashes[-1])
        return found is not None and found[1] == len(hashes)

    def has_checkpoint(self, block_hash: int) -> bool:
        """Whether a checkpoint of the prefix ending on that block is kept in memory."""
        return block_hash in self._lone or block_hash in self._shared

    def seen(self, hashes: list[int]) -> None:
        """An admitted prompt holds the prefixes ``hashes``: each kept checkpoint among them
        counts one more use (a second one ranks it with the shared ones) and becomes recently
        used, deepest first, so that the shallowest end up the most recently used."""
        for h in reversed(hashes):
            entry = self._lone.pop(h, None) or self._shared.pop(h, None)
            if entry is not None:
                entry.uses += 1
                self._shared[h] = entry

    def reach(self, hashes: list[int]) -> int:
        """How many leading blocks of ``hashes`` a saved state covers, in memory or on disk
        (nothing is read)."""
        for n in range(len(hashes), 0, -1):
            if hashes[n - 1] in self._index:
                break
        else:
            n = 0
        return max(n, self.disk.reach(hashes, n)) if self.disk is not None else n

    def longest(self, hashes: list[int]) -> tuple[HostEntry | None, int]:
        """The saved entry covering the most leading blocks of ``hashes``, and how many: from
        memory, or read back from the disk tier when it holds a longer prefix."""
        entry, n = None, 0
        for i in range(len(hashes), 0, -1):
            found = self._index.get(hashes[i - 1])
            if found is not None:
                entry, n = found[0], i
                self._states.move_to_end(entry.hashes[-1])
                break
        if self.disk is not None and len(hashes) > n:
            read = self.disk.longest(hashes, longer_than=n)
            if read is not None:
                saved, data, n = read
                self._put_state(saved, data)  # kept in memory too (if it fits), not written again
                return HostEntry(saved, data, from_disk=True), n
        return entry, n

    def checkpoint(self, hashes: list[int], at_most: int) -> HostEntry | None:
        """The checkpoint of the longest prefix of ``hashes`` of at most ``at_most`` blocks,
        in memory or on disk."""
        for n in range(min(at_most, len(hashes)), 0, -1):
            h = hashes[n - 1]
            entry = self._lone.get(h) or self._shared.get(h)
            if entry is not None and entry.blocks == n:
                (self._lone if entry.uses == 1 else self._shared).move_to_end(h)
                return entry
            if self.disk is not None and self.disk.has_checkpoint(h, n):
                data = self.disk.read_checkpoint(h, n)
                if data is not None:
                    self._put_checkpoint(h, n, data)
                    entry = self._lone.get(h) or HostEntry([h], data, n)
                    entry.from_disk = True
                    return entry
        return None

    def stats(self) -> TierStats:
        states = TierCounters(len(self._states), self.state_bytes, self.state_lookups.hits,
                              self.state_lookups.misses, self.state_lookups.hit_tokens)
        ckpts = TierCounters(self.num_checkpoints, self.checkpoint_bytes, self.checkpoint_lookups.hits,
                             self.checkpoint_lookups.misses, self.checkpoint_lookups.hit_tokens)
        return TierStats(self.capacity_bytes, states, ckpts, hit_rate(states, ckpts))
