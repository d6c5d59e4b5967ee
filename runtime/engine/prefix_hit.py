"""A prompt's reusable prefix, as the KV cache manager found it (``kv_cache_manager.py``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.engine.block_pool import Block
from runtime.engine.host_cache import HostEntry


@dataclass(slots=True)
class PrefixHit:
    """A prompt's reusable prefix: cached device blocks, or a saved state in host memory."""

    blocks: list[Block]
    host: HostEntry | None = None
    #: blocks restored from host memory (a saved state, a checkpoint or both); with
    #: device ``blocks``, 0
    host_blocks: int = 0
    #: the partial state to put on top of the prefix's cells (memory with checkpoints)
    checkpoint: HostEntry | None = None
    #: chained hashes of the prompt's full blocks before its last token (what any tier
    #: could serve)
    hashes: list[int] = field(default_factory=list)
    #: blocks of a prefix this prompt shares with another kept prompt, where the two part,
    #: when no state (or checkpoint) of exactly that prefix is kept yet: saved once the
    #: request's sequence holds it; 0: none
    parts: int = 0
    #: the cached block the prompt parts from inside, after ``blocks``, and how many of its
    #: leading tokens the prompt shares (copied too: token granularity); None: none
    partial: "Partial | None" = None

    def num_blocks(self) -> int:
        return len(self.blocks) if self.blocks else self.host_blocks

    @property
    def intact(self) -> bool:
        """Whether every device block still has a sequence holding its cells (a holder that
        gave way for a sequence id after the lookup takes them)."""
        return all(block.seqs for block in self.blocks) and (self.partial is None or self.partial.intact)


@dataclass(slots=True)
class Partial:
    """Leading tokens of a cached block that a prompt shares before it parts from it."""

    block: Block
    block_hash: int  #: the block's hash at the lookup (it may be evicted and reused after)
    tokens: int

    @property
    def intact(self) -> bool:
        return self.block.hash == self.block_hash and bool(self.block.seqs)
