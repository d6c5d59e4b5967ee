"""The KV cache manager's statistics, as they cross the pipe (``EngineStats.kv``).

Apart from the manager so that the service, which reads them, loads none of the cache's code
(nor numpy, which its block hashes use).
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.engine.host_cache import TierStats


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
    host_bytes: int = 0
    host_entries: int = 0
    host_hit_tokens: int = 0
    #: checkpoints kept (their bytes are in host_bytes), taken and restored so far
    checkpoints: int = 0
    checkpoints_saved: int = 0
    checkpoints_restored: int = 0
    #: attention, sliding-window, recurrent or hybrid (``MemoryLayout.kind``)
    memory: str = "attention"
    #: the host-memory and disk tiers: entries, bytes, hits and misses, states and
    #: checkpoints apart (None: the tier is off)
    host_tier: TierStats | None = None
    disk_tier: TierStats | None = None
