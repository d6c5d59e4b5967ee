"""The host-memory tier of the prefix cache: saved sequence states in RAM.

Cached tokens held on the device slow every decode in a unified KV pool, so the device
keeps a bounded cache; when a holder sequence loses its blocks, its cells are saved with
``llama_state_seq_get_data`` (about 29 ms for 2,000 SmolLM2 tokens here) and kept here,
least recently used out first, within ``capacity_bytes``. A later prompt with that prefix
restores them (``llama_state_seq_set_data``, about 5 ms) instead of recomputing (seconds).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(slots=True, eq=False)
class HostEntry:
    hashes: list[int]  # chained hashes of the saved sequence's full blocks, in order
    data: bytes  # llama.cpp's saved state of that sequence


class HostCache:
    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self._entries: OrderedDict[int, HostEntry] = OrderedDict()  # keyed by last hash
        self._index: dict[int, tuple[HostEntry, int]] = {}  # block hash -> (entry, blocks)
        self.bytes = 0
        self.hit_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, hashes: list[int], data: bytes) -> bool:
        """Keep a saved state of the blocks ``hashes``; False if it cannot fit at all."""
        if not hashes or len(data) > self.capacity_bytes:
            return False
        known = self._index.get(hashes[-1])
        if known is not None and known[1] == len(hashes):
            self._entries.move_to_end(hashes[-1])
            return True  # the same prefix is already saved
        entry = HostEntry(list(hashes), data)
        self._entries[hashes[-1]] = entry
        self.bytes += len(data)
        for i, h in enumerate(hashes):
            self._index[h] = (entry, i + 1)  # equal hashes: equal prefixes, so the newest serves
        while self.bytes > self.capacity_bytes:
            self._drop(next(iter(self._entries)))
        return True

    def _drop(self, key: int) -> None:
        entry = self._entries.pop(key)
        self.bytes -= len(entry.data)
        for h in entry.hashes:
            if self._index.get(h, (None,))[0] is entry:
                del self._index[h]

    def has(self, hashes: list[int]) -> bool:
        """Whether a saved entry already covers all of ``hashes``."""
        found = self._index.get(hashes[-1])
        return found is not None and found[1] == len(hashes)

    def longest(self, hashes: list[int]) -> tuple[HostEntry | None, int]:
        """The saved entry covering the most leading blocks of ``hashes``, and how many."""
        for n in range(len(hashes), 0, -1):
            found = self._index.get(hashes[n - 1])
            if found is not None:
                entry, _ = found
                self._entries.move_to_end(entry.hashes[-1])
                return entry, n
        return None, 0
