"""KV blocks: a pool of fixed-size blocks with reference counts and a prefix cache.

llama.cpp allocates KV cells anywhere in its pool; blocks are Hearth's accounting of those
cells, ``block_size`` tokens each, as in vLLM. A full block may carry the chained hash of
its tokens; while its hash is registered, a later request whose prompt has the same prefix
can reuse it. Each cached block is also listed under its parent's hash, so that a prompt
that parts from the cache inside a block can find the block it parts from (and reuse its
tokens up to there: ``children``); the cache manager keeps a finished request's partial
last block that way too, under a hash of its tokens so far. Blocks with no references wait in a free queue in least-recently-used order
(a request's blocks are freed tail first, so a prefix's tail is evicted before its head);
allocating one that still carries a hash evicts it from the cache.

No llama.cpp here: the pool only decides; ``on_evict`` lets the cache manager act.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass(slots=True, eq=False)
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None
    tokens: tuple[int, ...] | None = None
    #: index of the block in its token sequence (positions index*B ... index*B + B - 1)
    index: int = 0
    #: sequence ids whose llama.cpp cells hold this block; the first is the designated one
    seqs: list[int] = field(default_factory=list)
    #: the hash of the block before it (the cache's root for a first block), while cached
    parent: int | None = None

    def reset(self) -> None:
        self.ref_count, self.hash, self.tokens, self.index, self.parent = 0, None, None, 0, None
        self.seqs.clear()


class BlockPool:
    def __init__(self, num_blocks: int, block_size: int,
                 on_evict: Callable[[Block], None] | None = None) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("a block pool needs at least one block of at least one token")
        self.block_size = block_size
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self._cached: dict[int, Block] = {}
        self._children: dict[int, set[int]] = {}  # parent hash -> hashes of cached blocks after it
        self._on_evict = on_evict
        self.evictions = 0
        self.num_cached_free = 0  # cached blocks nobody references: the evictable cache

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free(self) -> int:
        """Blocks that can be allocated now (free, including cached ones that would be evicted)."""
        return len(self._free)

    @property
    def num_cached(self) -> int:
        return len(self._cached)

    @property
    def num_used(self) -> int:
        return len(self.blocks) - len(self._free)

    def lookup(self, block_hash: int, tokens: Sequence[int]) -> Block | None:
        """The cached block with this hash, if its stored tokens are really ``tokens``."""
        block = self._cached.get(block_hash)
        if block is None or block.tokens != tuple(tokens):
            return None
        return block

    def touch(self, blocks: Sequence[Block]) -> None:
        """Take a reference on cached blocks (a prefix hit); they leave the free queue."""
        for b in blocks:
            if b.ref_count == 0:
                del self._free[b.block_id]
                self.num_cached_free -= b.hash is not None
            b.ref_count += 1

    def allocate(self, n: int) -> list[Block] | None:
        """``n`` blocks with one reference each, or None when there are not enough."""
        if n > len(self._free):
            return None
        out = []
        for _ in range(n):
            block_id, _ = self._free.popitem(last=False)
            block = self.blocks[block_id]
            if block.hash is not None:
                self.num_cached_free -= 1
                self._evict(block)
            block.reset()
            block.ref_count = 1
            out.append(block)
        return out

    def free(self, blocks: Sequence[Block]) -> None:
        """Drop one reference from each block; unreferenced ones join the free queue, tail first."""
        for b in reversed(blocks):
            if b.ref_count <= 0:
                raise ValueError(f"block {b.block_id} freed more often than referenced")
            b.ref_count -= 1
            if b.ref_count == 0:
                if b.hash is None:
                    b.reset()
                else:
                    self.num_cached_free += 1
                self._free[b.block_id] = None

    def cache(self, block: Block, block_hash: int, tokens: Sequence[int], index: int,
              parent: int | None = None) -> bool:
        """Register a block under its hash (and under ``parent``, the hash of the block before
        it, when given); False if another block already has the hash."""
        if block_hash in self._cached:
            return self._cached[block_hash] is block
        block.hash, block.tokens, block.index, block.parent = block_hash, tuple(tokens), index, parent
        self._cached[block_hash] = block
        if parent is not None:
            self._children.setdefault(parent, set()).add(block_hash)
        return True

    def children(self, parent: int) -> list[Block]:
        """The cached blocks registered after the block whose hash is ``parent``."""
        return [self._cached[h] for h in self._children.get(parent, ())]

    def uncache(self, block: Block) -> None:
        """Forget a block's hash (its cells are gone); it stays allocated if referenced."""
        if block.hash is not None and self._cached.get(block.hash) is block:
            del self._cached[block.hash]
            if block.parent is not None:
                siblings = self._children.get(block.parent)
                if siblings is not None:
                    siblings.discard(block.hash)
                    if not siblings:
                        del self._children[block.parent]
        block.hash, block.tokens, block.parent = None, None, None

    def forget(self, block: Block) -> None:
        """A cached block whose cells are gone: it loses its hash (an unreferenced one stays
        in the free queue as a plain free block)."""
        if block.hash is None:
            return
        if block.ref_count == 0:
            self.num_cached_free -= 1
        self.uncache(block)

    def trim_cache(self, keep: int) -> int:
        """Evict least-recently-used unreferenced cached blocks until at most ``keep`` remain."""
        evicted = 0
        if self.num_cached_free <= keep:
            return 0
        for block_id in list(self._free):
            if self.num_cached_free <= keep:
                break
            block = self.blocks[block_id]
            if block.hash is not None:
                self.num_cached_free -= 1
                self._evict(block)
                block.reset()
                evicted += 1
        return evicted

    def make_room(self, n: int) -> bool:
        """Evict least recently used unreferenced cached blocks until ``n`` free blocks hold no
        cache (cells llama.cpp can fill at once, as a restored state's cells must be); False when
        even evicting all of them leaves fewer."""
        deficit = n - (len(self._free) - self.num_cached_free)
        if deficit > 0:
            self.trim_cache(max(0, self.num_cached_free - deficit))
        return len(self._free) - self.num_cached_free >= n

    def _evict(self, block: Block) -> None:
        self.evictions += 1
        if self._on_evict is not None:
            self._on_evict(block)
        self.uncache(block)
