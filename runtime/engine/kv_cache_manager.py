"""Per-request block tables over llama.cpp's unified KV pool, with prefix caching.

The pool (``block_pool.py``) decides; this module carries the decisions out on llama.cpp
through the backend's memory API:

- a running request owns the cells of its sequence id;
- a prefix hit copies cached blocks into the new sequence: ``seq_cp(src, dst, p0, p1)``
  only adds ``dst`` to the owners of those cells (zero-copy), runs of blocks held by the
  same sequence in one call;
- a finished request's sequence becomes a *holder* of its full blocks (duplicates are removed
  with ``seq_rm``); evicting a cached block removes its cells from its holder, and a holder
  with no blocks frees its sequence id;
- token granularity (full-attention memory): a holder keeps its partial last block too (the
  end of its prompt or of its reply), cached under a hash of its tokens so far; a prompt that
  parts from the cache inside a block (its own next turn, or a prompt that differs from a
  cached one a few tokens into a block) copies the leading tokens it shares with the cached
  block there (``PrefixHit.partial``), so it recomputes only the tokens that differ, as
  llama-server's slot does. Not for a seeded sampled request: llama.cpp's logits depend on
  how the prompt was cut into steps (measured on SmolLM2: up to 1.2 apart), so such a request
  recomputes its prompt from the block boundary every time, as before, and samples the same;
- sequence ids are bounded (running slots + holders <= n_seq_max): when none is free, the
  least recently used holder that holds none of the admitted prefix is dropped; so it is
  when llama.cpp finds no room for a step
  (sliding-window layers hold a window per sequence id, not per block: ``engine.py``);
- the memory's operations take positions, which are the tokens' indices except after an
  image that M-RoPE places on a grid (``runtime.media.PositionMap``: its embeddings share one
  position); the manager keeps each such sequence's map, and a prefix never ends inside such
  an image (it is rounded down to a block boundary before it: llama-server keeps image chunks
  whole in its cache too);
- memory that cannot be cut at any position (sliding-window layers, recurrent state) is
  reused through checkpoints (``checkpoints.py``): a hit ends at the longest checkpoint at
  or below the matching prefix, whose partial state goes on top of the prefix's cells;
- a saved state is loaded whole before it is trimmed to the hit, so its cells must all fit:
  idle cached cells make room first (another conversation's idle holder kept more than the
  rest of the pool, and a new session of an agent recomputed all of its tools);
- where a prompt parts from a prefix that another kept prompt goes on with (a new session of
  an agent: the same tools and instructions, its own conversation), the state of that shared
  prefix is saved on its own, and a checkpoint there where the memory needs them: the host and
  disk tiers keep it after single conversations' states, and every later session restores all
  of it, not only up to the last checkpoint every ``checkpoint_every`` blocks.
"""

from __future__ import annotations

from collections import OrderedDict

from runtime.engine.block_pool import Block, BlockPool
from runtime.engine.checkpoints import Checkpoints, MemoryLayout
from runtime.engine.disk_cache import DiskCache
from runtime.engine.host_cache import HostCache, HostEntry, TierCounters
from runtime.engine.kv_memory import KVMemory
from runtime.engine.prefix_hit import Partial, PrefixHit
from runtime.engine.kv_stats import KVStats  # noqa: F401 (re-exported: the manager's statistics)
from runtime.engine.request import Request
from runtime.kernels.block_hash import ROOT, hash_block
from runtime.media import PositionMap

#: a prefix shared by two prompts is saved on its own from this many blocks (shorter ones are
#: recomputed in a moment; every prompt shares its first block or two with every other)
SHARED_MIN_BLOCKS = 16


class KVCacheManager:
    def __init__(self, memory: KVMemory, num_blocks: int, block_size: int, n_seq: int,
                 prefix_cache: bool = True, cache_fraction: float = 1.0, n_swa: int = 0,
                 host_bytes: int = 0, layout: MemoryLayout | None = None,
                 checkpoint_every: int = 32, disk: DiskCache | None = None) -> None:
        self._memory = memory  # the only handle on the cells: nothing else in the engine has one
        self.block_size = block_size
        self.pool = BlockPool(num_blocks, block_size, on_evict=self._on_evict)
        self.prefix_cache = prefix_cache
        self.layout = layout or MemoryLayout(partial=n_swa > 0)
        self.cache_keep = int(num_blocks * cache_fraction) if self.layout.holders else 0
        self.n_swa = n_swa
        self.tables: dict[str, list[Block]] = {}
        self._free_seqs = list(range(n_seq - 1, -1, -1))
        self._held: dict[int, int] = {}  # holder seq -> blocks it holds
        self._holders: OrderedDict[int, None] = OrderedDict()  # LRU order of idle holders
        self.prefix_hit_tokens = 0
        self.prompt_tokens = 0
        #: holders dropped to make room for a step (``drop_idle_holder``)
        self.holders_dropped = 0
        self.host = HostCache(host_bytes, disk) if prefix_cache and host_bytes > 0 else None
        self.checkpoints = (Checkpoints(memory, self.host, block_size, checkpoint_every)
                            if self.host is not None and self.layout.partial else None)
        #: request id -> (position, block hashes) of the shared prefix to save when its
        #: computed tokens reach that position (``PrefixHit.parts``)
        self._shared_at: dict[str, tuple[int, list[int]]] = {}
        #: sequence -> where its tokens sit, for sequences whose positions are not their tokens'
        #: indices (M-RoPE images), running or holding
        self._maps: dict[int, PositionMap] = {}
        #: copy cells at token granularity: full attention only (a sliding window or a recurrent
        #: state is restored from checkpoints, which end on block boundaries)
        self.token_reuse = prefix_cache and self.layout.kind == "attention"
        #: finished requests whose release waits until their last output is sent (``flush``)
        self._finishing: list[tuple[Request, bool]] = []

    def _pos(self, seq: int, i: int) -> int:
        """The position of token ``i`` of sequence ``seq`` (what the memory's operations take)."""
        m = self._maps.get(seq)
        return i if m is None else m.pos_of(i)

    def _whole(self, request: Request, n_blocks: int) -> int:
        """The most blocks ``<= n_blocks`` of a prefix that ends inside no image whose embeddings
        share positions (its cells cannot be cut there)."""
        if request.media is None or request.media.pos_map.identity:
            return n_blocks
        m, b = request.media.pos_map, self.block_size
        while n_blocks and m.floor(n_blocks * b) != n_blocks * b:
            n_blocks = m.floor(n_blocks * b) // b
        return n_blocks

    # -- sequence ids -----------------------------------------------------------------
    def acquire_seq(self, hit: PrefixHit | None = None) -> int | None:
        """A free sequence id; drops the least recently used holder when none is free, one
        that holds none of ``hit``'s blocks where there is such a holder. A hit whose holder
        had to go is stale afterwards (``PrefixHit.intact``)."""
        if not self._free_seqs and self._holders:
            used = {s for block in hit.blocks for s in block.seqs} if hit is not None else set()
            if hit is not None and hit.partial is not None:
                used.update(hit.partial.block.seqs)
            self._drop_holder(next((s for s in self._holders if s not in used), next(iter(self._holders))))
        return self._free_seqs.pop() if self._free_seqs else None

    def release_unused_seq(self, seq: int) -> None:
        """Give back a sequence id from ``acquire_seq`` that was never admitted."""
        self._free_seqs.append(seq)

    def drop_idle_holder(self) -> bool:
        """Drop the least recently used holder: its cells leave the device (what it held stays
        in the host tier where that is on). False when no sequence holds anything."""
        if not self._holders:
            return False
        self._drop_holder(next(iter(self._holders)))
        self.holders_dropped += 1
        return True

    def _drop_holder(self, seq: int) -> None:
        for block in self.pool.blocks:
            if seq in block.seqs:
                self._leave(block, seq)
        self._memory.seq_rm(seq, 0, None)
        self._release_seq(seq)

    def _release_seq(self, seq: int) -> None:
        self._maps.pop(seq, None)
        self._held.pop(seq, None)
        self._holders.pop(seq, None)
        self._free_seqs.append(seq)

    def _leave(self, block: Block, seq: int) -> None:
        """``seq`` stops holding ``block``; a cached block nobody holds loses its hash."""
        block.seqs.remove(seq)
        if not block.seqs:
            self.pool.forget(block)

    def _save_to_host(self, seq: int, hashes: list[int], prompt_len: int) -> None:
        """Save a finishing request's cells to host memory, while its sequence still owns its
        whole prefix (shared blocks included); the device may evict them later."""
        assert self.host is not None  # called only with the host tier on
        if hashes and not self.host.has(hashes):
            self.host.put(hashes, self._memory.state_seq_save(seq), (prompt_len - 1) // self.block_size)

    def _on_evict(self, block: Block) -> None:
        b = self.block_size
        for seq in list(block.seqs):
            self._memory.seq_rm(seq, self._pos(seq, block.index * b), self._pos(seq, (block.index + 1) * b))
            block.seqs.remove(seq)
            if seq in self._held:
                self._held[seq] -= 1
                if self._held[seq] == 0:
                    self._release_seq(seq)

    # -- admission --------------------------------------------------------------------
    def get_computed_blocks(self, request: Request) -> PrefixHit:
        """The longest reusable prefix of the request's tokens, on the device or in host
        memory (at least one token always stays to be computed, for its logits).

        A request that wants prompt logprobs gets none: it needs the logits of every prompt
        position, and cached positions are not computed."""
        if not self.prefix_cache or request.wants_prompt_rows:
            return PrefixHit([])
        b = self.block_size
        hits: list[Block] = []
        hashes: list[int] = []
        parent = request.cache_root
        for i in range((len(request.tokens) - 1) // b):
            chunk = request.tokens[i * b:(i + 1) * b]
            parent = hash_block(parent, chunk)
            hashes.append(parent)
            if len(hits) == i:
                block = self.pool.lookup(parent, chunk)
                if block is not None and block.seqs and self.layout.cells:
                    hits.append(block)
                elif self.host is None:
                    break
        hits = hits[:self._whole(request, len(hits))]
        if self.checkpoints is not None:
            hit = self._checkpoint_hit(hashes, hits)
        elif self.host is not None and len(hashes) > len(hits):
            entry, n = self.host.longest(hashes)
            if (k := self._whole(request, n)) < n:
                entry, n = self.host.longest(hashes[:k]) if k > len(hits) else (None, 0)
            hit = PrefixHit([], entry, n) if entry is not None and n > len(hits) else PrefixHit(hits)
        else:
            hit = PrefixHit(hits)
        hit.hashes = hashes
        if self.host is not None and request.num_preemptions == 0:
            hit.parts = self._parting(hashes, len(hits))
        if self.token_reuse and not hit.host_blocks and self._exact_tokens(request):
            hit.partial = self._partial(request, hit)
        return hit

    @staticmethod
    def _exact_tokens(request: Request) -> bool:
        """Whether ``request`` may start from cells copied at any token (see the module
        docstring): not a seeded sampled one, nor one whose positions are not its tokens'."""
        p = request.params
        if p.seed is not None and p.temperature > 0:
            return False
        return request.media is None or request.media.pos_map.identity

    def _partial(self, request: Request, hit: PrefixHit) -> Partial | None:
        """The cached block after ``hit``'s device blocks that shares the most leading tokens
        with the prompt there (at most all but the prompt's last token)."""
        j, b = len(hit.blocks), self.block_size
        start = j * b
        want = request.tokens[start:min(start + b, len(request.tokens) - 1)]
        if not want:
            return None
        parent = hit.hashes[j - 1] if j else request.cache_root
        best: Partial | None = None
        for block in self.pool.children(parent):
            if not block.seqs or block.tokens is None or block.hash is None or block.seqs[0] in self._maps:
                continue
            m = _common(block.tokens, want)
            if m and (best is None or m > best.tokens):
                best = Partial(block, block.hash, m)
        return best

    def _parting(self, hashes: list[int], device: int) -> int:
        """Where the prompt whose blocks are ``hashes`` parts from a prefix it shares with another
        kept prompt, in blocks, when that shared prefix is not saved on its own yet; else 0."""
        assert self.host is not None  # only the host and disk tiers keep a shared prefix
        n = max(device, self.host.reach(hashes))
        if n < SHARED_MIN_BLOCKS or not self.host.parts(hashes, n):
            return 0
        shared = hashes[:n]
        if (not self.layout.cells or self.host.has_shared(shared, checkpoint=False)) and (
                self.checkpoints is None or self.host.has_shared(shared, checkpoint=True)):
            return 0
        return n

    def cached_reach(self, tokens: list[int], root: int = ROOT) -> int:
        """How many leading tokens of a prompt not yet admitted the cache holds, on the device
        or in the host and disk tiers (a query: nothing is read or moved), in the cache scope
        whose root hash is ``root``. The worker runs a medium's projector only for media past it."""
        if not self.prefix_cache:
            return 0
        b = self.block_size
        parent, n, device = root, 0, True
        hashes: list[int] = []
        for i in range((len(tokens) - 1) // b):
            chunk = tokens[i * b:(i + 1) * b]
            parent = hash_block(parent, chunk)
            hashes.append(parent)
            block = self.pool.lookup(parent, chunk) if device else None
            device = block is not None and bool(block.seqs) and self.layout.cells
            n += device
        if self.host is not None:
            n = max(n, self.host.reach(hashes))
        return n * b

    def _checkpoint_hit(self, hashes: list[int], hits: list[Block]) -> PrefixHit:
        """The hit for memory that needs checkpoints: the prefix's cells (device blocks or a
        saved state) up to the longest checkpoint they reach. Device blocks that go further
        are tried whole first where their sliding window may be intact (``admit``)."""
        d = len(hits)
        assert self.host is not None  # checkpoints are kept only with the host tier on
        reach = max(d, self.host.reach(hashes)) if self.layout.cells else len(hashes)
        ckpt = self.host.checkpoint(hashes, reach)
        c = ckpt.blocks if ckpt is not None else 0
        if d > c and self.layout.holders:
            return PrefixHit(hits, checkpoint=ckpt)
        if c == 0:
            return PrefixHit([])
        if d >= c:
            return PrefixHit(hits[:c], checkpoint=ckpt)
        if not self.layout.cells:
            return PrefixHit([], None, c, ckpt)
        # only now the saved state (a read from disk, maybe): the checkpoint says how far it serves
        entry, h = self.host.longest(hashes[:c])
        if h == c:
            return PrefixHit([], entry, c, ckpt)
        # the file that reached it went since (another model's writer made room): what was read
        # serves up to a checkpoint below
        return self._checkpoint_hit(hashes[:h], hits[:h]) if h else PrefixHit([])

    def blocks_needed(self, request: Request, hit: PrefixHit) -> int:
        """Blocks to allocate for the rest of the prompt (host-restored blocks included)."""
        return -(-len(request.tokens) // self.block_size) - len(hit.blocks)

    @property
    def num_free_blocks(self) -> int:
        return self.pool.num_free

    def admit(self, request: Request, seq: int, hit: PrefixHit) -> None:
        """Give ``request`` its sequence and its cached prefix (copied zero-copy, or restored)."""
        request.seq_id = seq
        if request.media is not None and not request.media.pos_map.identity:
            self._maps[seq] = request.media.pos_map
        if hit.parts:
            self._shared_at[request.request_id] = (hit.parts * self.block_size, hit.hashes[:hit.parts])
        if not hit.blocks and hit.host_blocks:
            self._restore(request, seq, hit)
            self._save_shared(request)
            self._trim_idle()
            return
        hits = list(hit.blocks)
        self.pool.touch(hits)
        self._copy_prefix(hits, seq)
        ckpt = hit.checkpoint
        restored = False
        # Copied cells serve whole where their sliding window is intact (a checkpoint that ends
        # there too would only cost a load, which the window cache may have no room for); the
        # state of a hybrid is not copied with them: its checkpoint always goes on.
        if hits and not (self.layout.holders and self._prefix_ok(seq, len(hits))):
            # fall back to the checkpoint below it, or recompute; never guess
            hits = self._drop_tail(seq, hits, ckpt.blocks if ckpt is not None else 0)
            if hits:
                assert self.checkpoints is not None and ckpt is not None  # kept blocks end at the checkpoint
                restored = self.checkpoints.restore(seq, ckpt) and self._prefix_ok(seq, len(hits))
                if not restored:
                    hits = self._drop_tail(seq, hits, 0)
        self._count(hit, None, ckpt if restored else None)
        self._admitted(request, hits, len(hits) * self.block_size)
        self._save_shared(request)  # a shared prefix ends on a block boundary: before the partial block
        if hit.partial is not None and len(hits) == len(hit.blocks):
            m = self._copy_partial(seq, request.num_computed, hit.partial)
            request.num_computed += m
            if request.num_preemptions == 0:
                request.cached_tokens += m
                self.prefix_hit_tokens += m
        self._trim_idle()

    def _copy_partial(self, seq: int, start: int, partial: Partial) -> int:
        """Copy the shared leading tokens of a cached block onto ``seq`` at ``start``; how many."""
        if not partial.intact:
            return 0
        src, m = partial.block.seqs[0], partial.tokens
        self._memory.seq_cp(src, seq, start, start + m)
        if self._memory.seq_pos_max(seq) != start + m - 1:  # never guess: recompute them
            self._memory.seq_rm(seq, start, None)
            return 0
        self.touch_holder(src)
        return m

    def _save_shared(self, request: Request) -> None:
        """Save the shared prefix where the request's prompt parts from another's, once its
        sequence holds exactly that prefix (at admission, or after the chunk that ends there):
        its state, and its checkpoint where the memory needs them; both rank as shared."""
        at = self._shared_at.get(request.request_id)
        if at is None or request.num_computed < at[0]:
            return
        del self._shared_at[request.request_id]
        seq, (n, hashes) = request.seq_id, at
        assert seq is not None and self.host is not None  # admitted; a shared prefix needs the host tier
        if request.num_computed != n or self._memory.seq_pos_max(seq) != self._pos(seq, n - 1):
            return  # past it already (the hit went further), or drafted cells past it
        if self.layout.cells and not self.host.has_shared(hashes, checkpoint=False):
            self.host.put(hashes, self._memory.state_seq_save(seq), len(hashes), shared=True)
        if self.checkpoints is not None and not self.host.has_shared(hashes, checkpoint=True):
            self.checkpoints.save(seq, hashes, shared=True)

    def _drop_tail(self, seq: int, hits: list[Block], keep: int) -> list[Block]:
        """Keep the first ``keep`` copied blocks of ``seq``'s prefix, release the rest."""
        self._memory.seq_rm(seq, self._pos(seq, keep * self.block_size), None)
        for block in hits[keep:]:
            block.seqs.remove(seq)
        self.pool.free(hits[keep:])
        return hits[:keep]

    def _prefix_ok(self, seq: int, n_blocks: int) -> bool:
        """Whether ``seq`` holds exactly positions 0..n-1 with their whole sliding window."""
        n = n_blocks * self.block_size
        return self._memory.seq_pos_max(seq) == self._pos(seq, n - 1) and (
            not self.n_swa or self._swa_intact(seq, n))

    def _admitted(self, request: Request, table: list[Block], n: int) -> None:
        self.tables[request.request_id] = table
        request.num_computed = n
        if request.num_preemptions == 0:
            request.cached_tokens = n
            self.prefix_hit_tokens += n
            self.prompt_tokens += request.prompt_len

    def _restore(self, request: Request, seq: int, hit: PrefixHit) -> None:
        """Load a saved state into ``seq`` as new cells, trimmed to the hit; on any doubt,
        fall back to computing the prompt."""
        n = hit.host_blocks * self.block_size
        blocks = self.pool.allocate(hit.host_blocks)
        ok = blocks is not None
        if ok and hit.host is not None:
            # the whole saved sequence goes in before the trim (its partial last block too)
            self.pool.make_room(len(hit.host.hashes) + 1 - hit.host_blocks)
            ok = self._memory.state_seq_load(seq, hit.host.data)
        # The partial state goes on before the trim: a hybrid's seq_rm refuses to cut
        # through its recurrent state, and the checkpoint's state ends exactly at ``n``.
        if ok and hit.checkpoint is not None:
            assert self.checkpoints is not None  # a hit has a checkpoint only when they are kept
            ok = self.checkpoints.restore(seq, hit.checkpoint)
        if ok:
            self._memory.seq_rm(seq, self._pos(seq, n), None)
            ok = self._prefix_ok(seq, hit.host_blocks)
        if not ok:
            self._memory.seq_rm(seq, 0, None)
            if blocks is not None:
                self.pool.free(blocks)
            self._count(hit, None, None)
            self._admitted(request, [], 0)
            return
        assert blocks is not None and self.host is not None  # ok: allocated; a restored hit comes from the host tier
        for block in blocks:
            block.seqs.append(seq)
        self.host.hit_tokens += n
        self._count(hit, hit.host, hit.checkpoint)
        self._admitted(request, blocks, n)

    def _count(self, hit: PrefixHit, state: HostEntry | None, checkpoint: HostEntry | None) -> None:
        """Count an admitted request's lookups in the host and disk tiers (a saved state is
        asked for when the device served none of the prompt's full blocks, a checkpoint
        whenever the memory needs them; ``state`` / ``checkpoint``: what was restored), and
        the uses of the checkpoints its prompt holds (their eviction order)."""
        if self.host is None or not hit.hashes:
            return
        if self.checkpoints is not None:
            self.host.seen(hit.hashes)
        b = self.block_size
        disk = self.host.disk
        if self.layout.cells and not hit.blocks:
            _count(self.host.state_lookups, disk.state_lookups if disk else None, state,
                   hit.host_blocks * b if state is not None else 0)
        if self.checkpoints is not None:
            _count(self.host.checkpoint_lookups, disk.checkpoint_lookups if disk else None, checkpoint,
                   checkpoint.blocks * b if checkpoint is not None else 0)

    def _copy_prefix(self, hits: list[Block], seq: int) -> None:
        b = self.block_size
        start = 0
        for i in range(1, len(hits) + 1):
            if i == len(hits) or hits[i].seqs[0] != hits[start].seqs[0]:
                self._memory.seq_cp(hits[start].seqs[0], seq, self._pos(seq, start * b), self._pos(seq, i * b))
                start = i
        for block in hits:
            self.touch_holder(block.seqs[0])
            block.seqs.append(seq)

    def _swa_intact(self, seq: int, n: int) -> bool:
        pos_min = self._memory.seq_pos_min(seq)
        return pos_min is not None and pos_min <= max(0, self._pos(seq, n) - self.n_swa)

    def allocate_slots(self, request: Request, n_new: int) -> bool:
        """Blocks for ``n_new`` more tokens after ``num_computed``; False if there is no room."""
        table = self.tables[request.request_id]
        need = -(-(request.num_computed + n_new) // self.block_size) - len(table)
        if need <= 0:
            return True
        blocks = self.pool.allocate(need)
        if blocks is None:
            return False
        assert request.seq_id is not None  # admitted: it has its sequence
        for block in blocks:
            block.seqs.append(request.seq_id)
        table.extend(blocks)
        return True

    def commit(self, request: Request) -> None:
        """Hash the request's newly full blocks and register them in the prefix cache.

        A block whose hash another block already has (two requests computed the same
        prefix at once) stays private to this request, and the chain goes on past it: a
        later hit copies each block from the sequence that holds it.
        """
        if not self.prefix_cache:
            return
        b = self.block_size
        table = self.tables[request.request_id]
        hashes = request.block_hashes
        for i in range(len(hashes), request.num_computed // b):
            tokens = request.tokens[i * b:(i + 1) * b]
            parent = hashes[-1] if hashes else request.cache_root
            h = hash_block(parent, tokens)
            hashes.append(h)
            self.pool.cache(table[i], h, tokens, i, parent)
        if self.checkpoints is not None:
            self.checkpoints.after_compute(request)
        if request.request_id in self._shared_at:
            self._save_shared(request)

    def chunk(self, request: Request, n: int) -> int:
        """How many of the next ``n`` tokens to compute this step: prefill chunks end where the
        prompt parts from a shared prefix, and on checkpoint positions where the memory needs them."""
        at = self._shared_at.get(request.request_id)
        if at is not None and request.num_computed < at[0] < request.num_computed + n:
            n = at[0] - request.num_computed
        return self.checkpoints.cut(request, n) if self.checkpoints is not None else n

    def truncate(self, request: Request, n: int) -> None:
        """Keep only positions ``0..n-1`` of the request's cells (a draft's too): after a
        verification accepted fewer tokens than were computed, or a step that was undone.
        Its blocks stay allocated; ``num_computed`` is the caller's."""
        assert request.seq_id is not None  # admitted: it has its sequence
        self._memory.seq_rm(request.seq_id, self._pos(request.seq_id, n), None)

    # -- release ----------------------------------------------------------------------
    def free(self, request: Request, keep_cache: bool, defer: bool = False) -> None:
        """Release a request's blocks. With ``keep_cache`` its sequence holds its cached blocks.

        ``defer``: only note it; ``flush`` releases it. A finished request's answer then goes
        out before its state is saved to the host tier (a copy of all its cells: 0.1 s for 2k
        tokens of a 1B model, a second for an agent's 20k), and the save runs while the client
        reads it; nothing else touches the request's cells or blocks in between."""
        if defer:
            self._finishing.append((request, keep_cache))
            return
        table = self.tables.pop(request.request_id, [])
        self._shared_at.pop(request.request_id, None)
        seq = request.seq_id
        hashes, request.block_hashes = request.block_hashes, []
        request.seq_id = None
        if seq is None:
            return
        if keep_cache and self.host is not None and self.layout.cells:
            self._save_to_host(seq, hashes, request.prompt_len)
        if keep_cache and self.token_reuse and seq not in self._maps:
            self._keep_tail(request, seq, table, hashes)
        held = 0
        for block in table:
            keep = keep_cache and self.layout.holders and block.hash is not None and block.seqs == [seq]
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
            self._memory.seq_rm(seq, 0, None)
            self._maps.pop(seq, None)
            self._free_seqs.append(seq)
        self.pool.free(table)
        if keep_cache and self.tables:
            self.pool.trim_cache(self.cache_keep)  # idle cells would slow the running requests' steps

    @property
    def finishing(self) -> bool:
        """Whether finished requests wait for ``flush``."""
        return bool(self._finishing)

    def flush(self) -> None:
        """Release the finished requests ``free(defer=True)`` noted, in the order they finished."""
        while self._finishing:
            request, keep_cache = self._finishing.pop(0)
            self.free(request, keep_cache)

    def _keep_tail(self, request: Request, seq: int, table: list[Block], hashes: list[int]) -> None:
        """Cache a finishing request's partial last block (the tokens it computed past its last
        full block) under a hash of those tokens, so that ``seq`` holds it with its full blocks."""
        b, n = self.block_size, request.num_computed
        k = n // b
        if n % b == 0 or k >= len(table) or len(hashes) < k:
            return
        block = table[k]
        if block.hash is not None or block.seqs != [seq]:
            return
        self._memory.seq_rm(seq, n, None)  # drafted cells past the computed tokens
        parent = hashes[k - 1] if k else request.cache_root
        tokens = request.tokens[k * b:n]
        self.pool.cache(block, hash_block(parent, tokens), tokens, k, parent)

    def _trim_idle(self) -> None:
        """Idle cached cells beyond ``cache_keep`` leave the device once a request runs (each
        step attends over the pool's used cells). Until then they stay: an agent's next turn,
        the usual next request, continues on them instead of restoring its prefix from host
        memory (a second per 20k tokens here), as llama-server's slot would."""
        self.pool.trim_cache(self.cache_keep)

    def _trim_seq(self, seq: int, table: list[Block]) -> None:
        b = self.block_size
        for i, block in enumerate(table):
            if seq not in block.seqs:
                self._memory.seq_rm(seq, self._pos(seq, i * b), self._pos(seq, (i + 1) * b))
        self._memory.seq_rm(seq, self._pos(seq, len(table) * b), None)

    def touch_holder(self, seq: int) -> None:
        if seq in self._holders:
            self._holders.move_to_end(seq)

    def stats(self) -> KVStats:
        p = self.pool
        h = self.host
        c = self.checkpoints
        return KVStats(self.block_size, p.num_blocks, p.num_used, p.num_cached,
                       self.prefix_hit_tokens, self.prompt_tokens, p.evictions, len(self._holders),
                       h.bytes if h else 0, len(h) if h else 0, h.hit_tokens if h else 0,
                       h.num_checkpoints if h else 0, c.saved if c else 0, c.restored if c else 0,
                       self.layout.kind, h.stats() if h else None,
                       h.disk.stats() if h and h.disk else None)


def _common(a: tuple[int, ...], b: list[int]) -> int:
    """Length of the common leading run of ``a`` and ``b``."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _count(host: TierCounters, disk: TierCounters | None, entry: HostEntry | None, tokens: int) -> None:
    """One lookup: a hit of the tier that had ``entry`` (memory, or disk when it was read back
    from there), a miss of the tiers above it, and of both when nothing was restored."""
    if entry is not None and not entry.from_disk:
        host.hits += 1
        host.hit_tokens += tokens
        return
    host.misses += 1
    if disk is None:
        return
    if entry is None:
        disk.misses += 1
        return
    entry.from_disk = False
    disk.hits += 1
    disk.hit_tokens += tokens

