"""The host-memory tier of the prefix cache: saved sequence states and checkpoints in RAM.

Cached tokens held on the device slow every decode in a unified KV pool, so the device
keeps a bounded cache; when a holder sequence loses its blocks, its cells are saved with
``llama_state_seq_get_data`` (about 29 ms for 2,000 SmolLM2 tokens here) and kept here,
least recently used out first, within ``capacity_bytes``. A later prompt with that prefix
restores them (``llama_state_seq_set_data``, about 5 ms) instead of recomputing (seconds).

Checkpoints (``checkpoints.py``) share the same budget and the same LRU order: each is the
partial state (sliding-window cells, recurrent state) of a prefix that ends at a block
boundary, keyed by that block's chained hash.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(slots=True, eq=False)
class HostEntry:
    hashes: list[int]  # chained hashes of the saved sequence's full blocks, in order
    data: bytes  # llama.cpp's saved state of that sequence
    #: a checkpoint: the partial state of exactly ``len(hashes)`` blocks (``hashes`` holds
    #: only the last block's hash)
    blocks: int = 0

    @property
    def is_checkpoint(self) -> bool:
        return self.blocks > 0


class HostCache:
    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        #: LRU order of everything kept: ("s", last hash) states, ("c", hash) checkpoints
        self._entries: OrderedDict[tuple[str, int], HostEntry] = OrderedDict()
        self._index: dict[int, tuple[HostEntry, int]] = {}  # block hash -> (state entry, blocks)
        self._checkpoints: dict[int, HostEntry] = {}  # last block's hash -> checkpoint
        self.bytes = 0
        self.hit_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def num_checkpoints(self) -> int:
        return len(self._checkpoints)

    def put(self, hashes: list[int], data: bytes) -> bool:
        """Keep a saved state of the blocks ``hashes``; False if it cannot fit at all."""
        if not hashes or len(data) > self.capacity_bytes:
            return False
        known = self._index.get(hashes[-1])
        if known is not None and known[1] == len(hashes):
            self._entries.move_to_end(("s", known[0].hashes[-1]))
            return True  # the same prefix is already saved (maybe inside a longer one)
        entry = HostEntry(list(hashes), data)
        self._add(("s", hashes[-1]), entry)
        for i, h in enumerate(hashes):
            self._index[h] = (entry, i + 1)  # equal hashes: equal prefixes, so the newest serves
        self._shrink()
        return True

    def put_checkpoint(self, block_hash: int, blocks: int, data: bytes) -> bool:
        """Keep the partial state of the ``blocks``-block prefix whose last hash is ``block_hash``."""
        if blocks < 1 or len(data) > self.capacity_bytes:
            return False
        key = ("c", block_hash)
        if key in self._entries:
            self._entries.move_to_end(key)
            return True
        entry = HostEntry([block_hash], data, blocks)
        self._add(key, entry)
        self._checkpoints[block_hash] = entry
        self._shrink()
        return True

    def _add(self, key: tuple[str, int], entry: HostEntry) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self.bytes -= len(old.data)
        self._entries[key] = entry
        self.bytes += len(entry.data)

    def _shrink(self) -> None:
        while self.bytes > self.capacity_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: tuple[str, int]) -> None:
        entry = self._entries.pop(key)
        self.bytes -= len(entry.data)
        if entry.is_checkpoint:
            del self._checkpoints[key[1]]
            return
        for h in entry.hashes:
            if self._index.get(h, (None,))[0] is entry:
                del self._index[h]

    def has(self, hashes: list[int]) -> bool:
        """Whether a saved entry already covers all of ``hashes``."""
        found = self._index.get(hashes[-1])
        return found is not None and found[1] == len(hashes)

    def touch_checkpoint(self, block_hash: int) -> bool:
        """Whether a checkpoint of that prefix is kept (it becomes the most recently used)."""
        key = ("c", block_hash)
        if key not in self._entries:
            return False
        self._entries.move_to_end(key)
        return True

    def longest(self, hashes: list[int]) -> tuple[HostEntry | None, int]:
        """The saved entry covering the most leading blocks of ``hashes``, and how many."""
        for n in range(len(hashes), 0, -1):
            found = self._index.get(hashes[n - 1])
            if found is not None:
                entry, _ = found
                self._entries.move_to_end(("s", entry.hashes[-1]))
                return entry, n
        return None, 0

    def checkpoint(self, hashes: list[int], at_most: int) -> HostEntry | None:
        """The checkpoint of the longest prefix of ``hashes`` of at most ``at_most`` blocks."""
        for n in range(min(at_most, len(hashes)), 0, -1):
            entry = self._checkpoints.get(hashes[n - 1])
            if entry is not None and entry.blocks == n:
                self._entries.move_to_end(("c", hashes[n - 1]))
                return entry
        return None
