"""The host-memory tier of the prefix cache: saved sequence states and checkpoints in RAM.

Cached tokens held on the device slow every decode in a unified KV pool, so the device
keeps a bounded cache; when a holder sequence loses its blocks, its cells are saved with
``llama_state_seq_get_data`` (about 29 ms for 2,000 SmolLM2 tokens here) and kept here
within ``capacity_bytes``. A later prompt with that prefix restores them
(``llama_state_seq_set_data``, about 5 ms) instead of recomputing (seconds).

Checkpoints (``checkpoints.py``) share the budget: each is the partial state
(sliding-window cells, recurrent state) of a prefix that ends at a block boundary, keyed
by that block's chained hash. A *shared prefix* is a state or checkpoint that ends where two
prompts part (an agent's tools and instructions, then each session's own conversation: the
KV cache manager saves one when a prompt leaves a prefix that another kept prompt goes on
with). Eviction goes in four ranks, least recently used first within each: the states of
single conversations, then checkpoints whose prefix one request's prompt held, then shared
prefix states, then checkpoints whose prefix several requests' prompts held (``seen``); but
shared prefix states beyond ``SHARED_SHARE`` of the budget go first, so that they never
crowd out the conversation in progress. A state is the size of its whole sequence (about
360 MB for a 19k-token Gemma 3 prompt), a checkpoint a few MB, and a new session of an agent
needs the shared prefix more than the last sessions' states: in one LRU order the states of
a few requests pushed 32 of 41 checkpoints out, and the states of other directories'
sessions pushed out every state that held the first directory's prefix. Each admitted
prompt refreshes the checkpoints of its prefixes deepest first, so within a rank the
shallowest prefixes, which the most conversations share, are the last to go.

A block is indexed to every state that holds it, and a lookup restores the smallest one
that reaches furthest: dropping one state leaves the prefix it shared with others found
(one state per block lost an agent's tools whenever the state they pointed to went first),
and restoring a state needs free cells for all of it. A state whose blocks a newer state
covers entirely (the next turn of the same conversation) is dropped: it only took room; a
shared prefix state stays, since it is the smaller one to restore.

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

#: the most of a tier's budget that shared prefix states keep from the other entries (the
#: disk tier's too)
SHARED_SHARE = 0.5
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
    #: admitted requests whose prompt held this checkpoint's prefix (its own included); a
    #: shared prefix (a state or checkpoint where two prompts part) starts at 2
    uses: int = 1
    #: read back from the disk tier by the latest lookup, and not yet counted as a hit
    from_disk: bool = False
    #: a state: how many of its blocks its prompt filled before its last token (0: not known);
    #: a prompt that parts from it before that point shares a prefix with it
    prompt_blocks: int = 0

    @property
    def is_checkpoint(self) -> bool:
        return self.blocks > 0

    @property
    def shared(self) -> bool:
        return self.uses > 1


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
        #: states by their last hash, LRU first: single conversations', and shared prefixes
        self._states: OrderedDict[int, HostEntry] = OrderedDict()
        self._prefixes: OrderedDict[int, HostEntry] = OrderedDict()
        #: checkpoints by their last block's hash, LRU first: whose prefix one admitted prompt
        #: held, and several (``seen``) or where two prompts part
        self._lone: OrderedDict[int, HostEntry] = OrderedDict()
        self._shared: OrderedDict[int, HostEntry] = OrderedDict()
        #: block hash -> (blocks up to it, every state holding it); equal chained hashes are
        #: equal prefixes, so each holder holds it at the same position
        self._index: dict[int, tuple[int, list[HostEntry]]] = {}
        self.state_bytes = 0
        self.prefix_bytes = 0  # of the shared prefix states (within ``state_bytes``)
        self.checkpoint_bytes = 0
        #: prompt tokens restored from saved states and checkpoints (of this tier or the disk's)
        self.hit_tokens = 0
        #: lookups at admission, counted by the KV cache manager
        self.state_lookups = TierCounters()
        self.checkpoint_lookups = TierCounters()

    def __len__(self) -> int:
        return len(self._states) + len(self._prefixes) + self.num_checkpoints

    @property
    def bytes(self) -> int:
        return self.state_bytes + self.checkpoint_bytes

    @property
    def num_checkpoints(self) -> int:
        return len(self._lone) + len(self._shared)

    def entries(self) -> list[HostEntry]:
        """Every entry kept, in eviction order (the first goes first) while shared prefix
        states keep within their share."""
        return [*self._states.values(), *self._lone.values(), *self._prefixes.values(), *self._shared.values()]

    # -- saving -----------------------------------------------------------------------
    def put(self, hashes: list[int], data: builtins.bytes, prompt_blocks: int = 0, shared: bool = False) -> bool:
        """Keep a saved state of the blocks ``hashes`` (``prompt_blocks``: how many of them its
        prompt filled; ``shared``: a prefix where two prompts part); False if it cannot fit in
        memory at all (the disk tier may still keep it)."""
        if hashes and self.disk is not None:
            self.disk.put_state(hashes, data, prompt_blocks, shared)
        return self._put_state(hashes, data, prompt_blocks, shared)

    def _put_state(self, hashes: list[int], data: builtins.bytes, prompt_blocks: int = 0,
                   shared: bool = False) -> bool:
        if not hashes or len(data) > self.capacity_bytes:
            return False
        exact = self._exact(hashes)
        if exact is not None or (not shared and self.has(hashes)):
            # the same prefix is already saved (maybe inside a longer one)
            held = exact or self._holders(hashes[-1])[0]
            if shared and not held.shared:
                self._promote(held)
            self._touch(held)
            return True
        entry = HostEntry(list(hashes), data, uses=2 if shared else 1, prompt_blocks=prompt_blocks)
        for h in hashes:  # states it covers whole only take room now (a shared one stays smaller)
            for old in (self._states.get(h), self._prefixes.get(h) if shared else None):
                if old is not None:
                    self._drop_state(old)
        for i, h in enumerate(hashes):
            self._index.setdefault(h, (i + 1, []))[1].append(entry)
        (self._prefixes if shared else self._states)[hashes[-1]] = entry
        self.state_bytes += len(data)
        self.prefix_bytes += len(data) if shared else 0
        self._shrink(entry)
        return True

    def _promote(self, entry: HostEntry) -> None:
        """A single conversation's state turns out to be a shared prefix."""
        del self._states[entry.hashes[-1]]
        entry.uses = max(2, entry.uses)
        self._prefixes[entry.hashes[-1]] = entry
        self.prefix_bytes += len(entry.data)

    def put_checkpoint(self, block_hash: int, blocks: int, data: builtins.bytes, shared: bool = False,
                       memory: bool = True) -> bool:
        """Keep the partial state of the ``blocks``-block prefix whose last hash is ``block_hash``
        (``shared``: where two prompts part). Not ``memory``: on the disk tier alone, where
        there is one and it takes the write (memory otherwise); read back when a prompt needs it."""
        on_disk = blocks > 0 and self.disk is not None and self.disk.put_checkpoint(block_hash, blocks, data, shared)
        if on_disk and not memory:
            return True
        return self._put_checkpoint(block_hash, blocks, data, shared)

    def _put_checkpoint(self, block_hash: int, blocks: int, data: builtins.bytes, shared: bool = False) -> bool:
        if blocks < 1 or len(data) > self.capacity_bytes:
            return False
        known = self._lone.pop(block_hash, None)
        if known is not None or block_hash in self._shared:
            if known is not None:  # shared now, or still one prompt's
                known.uses = max(known.uses, 2 if shared else 1)
                (self._shared if known.shared else self._lone)[block_hash] = known
            return True
        entry = HostEntry([block_hash], data, blocks, uses=2 if shared else 1)
        (self._shared if shared else self._lone)[block_hash] = entry
        self.checkpoint_bytes += len(data)
        self._shrink(entry)
        return True

    # -- eviction ---------------------------------------------------------------------
    def _shrink(self, keep: HostEntry) -> None:
        """Evict until the budget holds, in the ranks of the module docstring; never ``keep``
        (the entry just saved, which fits alone)."""
        while self.bytes > self.capacity_bytes:
            victim = self._victim(keep)
            if victim is None:
                return
            if victim.is_checkpoint:
                self._drop_checkpoint(victim)
            else:
                self._drop_state(victim)

    def _victim(self, keep: HostEntry) -> HostEntry | None:
        ranks = [self._states, self._lone, self._prefixes, self._shared]
        if self.prefix_bytes > self.capacity_bytes * SHARED_SHARE:
            ranks.insert(0, self._prefixes)
        for rank in ranks:
            victim = next(iter(rank.values()), None)
            if victim is not None and victim is not keep:  # keep: the newest of its rank, alone in it
                return victim
        return None

    def _drop_state(self, entry: HostEntry) -> None:
        del (self._prefixes if entry.shared else self._states)[entry.hashes[-1]]
        self.state_bytes -= len(entry.data)
        self.prefix_bytes -= len(entry.data) if entry.shared else 0
        for h in entry.hashes:
            holders = self._index[h][1]
            holders.remove(entry)
            if not holders:
                del self._index[h]

    def _drop_checkpoint(self, entry: HostEntry) -> None:
        rank = self._shared if entry.uses > 1 else self._lone
        del rank[entry.hashes[0]]
        self.checkpoint_bytes -= len(entry.data)

    # -- lookups ----------------------------------------------------------------------
    def _holders(self, block_hash: int) -> list[HostEntry]:
        found = self._index.get(block_hash)
        return found[1] if found is not None else []

    def _exact(self, hashes: list[int]) -> HostEntry | None:
        """The state of exactly the blocks ``hashes``, if one is kept."""
        return next((e for e in self._holders(hashes[-1]) if len(e.hashes) == len(hashes)), None)

    def _touch(self, entry: HostEntry) -> None:
        (self._prefixes if entry.shared else self._states).move_to_end(entry.hashes[-1])

    def has(self, hashes: list[int]) -> bool:
        """Whether a saved entry in memory already covers all of ``hashes``."""
        found = self._index.get(hashes[-1])
        return found is not None and found[0] == len(hashes)

    def has_checkpoint(self, block_hash: int, blocks: int = 0) -> bool:
        """Whether a checkpoint of the prefix ending on that block is kept in memory (or, given
        its length in ``blocks``, on disk)."""
        if block_hash in self._lone or block_hash in self._shared:
            return True
        return blocks > 0 and self.disk is not None and self.disk.has_checkpoint(block_hash, blocks)

    def has_shared(self, hashes: list[int], checkpoint: bool) -> bool:
        """Whether the shared prefix ``hashes`` is kept already, in memory or on disk: its
        state, or with ``checkpoint`` its checkpoint."""
        if checkpoint:
            entry = self._shared.get(hashes[-1])
            if entry is not None and entry.blocks == len(hashes):
                return True
            return self.disk is not None and self.disk.has_checkpoint(hashes[-1], len(hashes), shared=True)
        exact = self._exact(hashes)
        if exact is not None and exact.shared:
            return True
        return self.disk is not None and self.disk.has_shared_state(hashes)

    def parts(self, hashes: list[int], n: int) -> bool:
        """Whether a prompt whose blocks are ``hashes`` parts at block ``n`` from a prefix it
        shares with another prompt: a state kept (in memory or on disk) holds its first ``n``
        blocks and its own prompt went on past them (the next turn of a conversation goes on
        past its previous prompt: it parts, if at all, in the previous reply)."""
        if not 0 < n < len(hashes):
            return False
        if any(e.prompt_blocks > n for e in self._holders(hashes[n - 1])):
            return True
        return self.disk is not None and self.disk.parts(hashes, n)

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
        """The smallest saved entry of those covering the most leading blocks of ``hashes``, and
        how many: from memory, or read back from the disk tier when it holds a longer prefix."""
        entry, n = None, 0
        for i in range(len(hashes), 0, -1):
            holders = self._holders(hashes[i - 1])
            if holders:
                entry, n = min(holders, key=lambda e: len(e.data)), i
                self._touch(entry)
                break
        if self.disk is not None and len(hashes) > n:
            read = self.disk.longest(hashes, longer_than=n)
            if read is not None:
                saved, data, n = read
                # kept in memory too (if it fits), not written again
                self._put_state(saved.hashes, data, saved.prompt_blocks, saved.shared)
                return HostEntry(saved.hashes, data, from_disk=True, prompt_blocks=saved.prompt_blocks), n
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
                    self._put_checkpoint(h, n, data, self.disk.has_checkpoint(h, n, shared=True))
                    entry = self._lone.get(h) or self._shared.get(h) or HostEntry([h], data, n)
                    entry.from_disk = True
                    return entry
        return None

    def stats(self) -> TierStats:
        states = TierCounters(len(self._states) + len(self._prefixes), self.state_bytes, self.state_lookups.hits,
                              self.state_lookups.misses, self.state_lookups.hit_tokens)
        ckpts = TierCounters(self.num_checkpoints, self.checkpoint_bytes, self.checkpoint_lookups.hits,
                             self.checkpoint_lookups.misses, self.checkpoint_lookups.hit_tokens)
        return TierStats(self.capacity_bytes, states, ckpts, hit_rate(states, ckpts))
