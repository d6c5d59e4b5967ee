"""State checkpoints: the prefix cache for memory that cannot be cut at any position.

A plain transformer's KV cells can be shared and trimmed at any token, so a cached prefix
is any run of full blocks. Three kinds of memory cannot:

- sliding-window layers (Gemma 2/3, gpt-oss, ...): llama.cpp keeps, and saves, only the
  last ``n_swa`` positions of a sequence, so a prefix that ends earlier than the saved end
  has lost part of its window;
- recurrent models (Mamba, Mamba-2, RWKV): one state per sequence, for its last position
  only; ``seq_rm`` cannot cut it and ``seq_cp`` of a prefix does not exist;
- hybrids (Jamba, Granite 4 hybrid, LFM2, ...): full-attention cells beside a recurrent state.

For these, the cache keeps *checkpoints*: the partial state
(``llama_state_seq_get_data_ext(..., LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)``: the sliding-window
cells of an iSWA cache, the recurrent state) of a prefix that ends at a block boundary,
taken where reuse is likely: the last block boundary of each prompt (the next turn of a chat
starts with this prompt), every ``every_blocks`` blocks of a long one, and where a prompt
parts from a prefix it shares with another (the next session of an agent starts with it). The scheduler cuts
prefill chunks at those positions so the state is exactly there after a decode. A new
request restores the longest checkpoint at or below its matching prefix: the full-attention
cells as for any prefix hit (zero-copy from the device, or from a saved state in host
memory), then the checkpoint's partial state on top, and computes only the rest.
llama-server keeps such checkpoints per slot (``--ctx-checkpoints``); here they live in the
host tier beside saved states, shared by every client, under one byte budget; they are
evicted after the saved states (``host_cache.py``), and those of a prefix that several
requests used last of all.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.engine.host_cache import HostCache, HostEntry
from runtime.engine.kv_memory import KVMemory
from runtime.engine.request import Request


@dataclass(slots=True, frozen=True)
class MemoryLayout:
    """What the model's memory allows, read from the loaded model."""

    #: part of the memory cannot be cut at any position: prefix reuse needs checkpoints
    partial: bool = False
    #: full-attention cells per token (shareable with seq_cp, trimmable with seq_rm)
    cells: bool = True
    #: finished sequences may hold their blocks on the device (needs cells that can be cut
    #: at a block boundary: not where a recurrent state shares the sequence id)
    holders: bool = True

    @property
    def kind(self) -> str:
        if not self.cells:
            return "recurrent"
        if not self.holders:
            return "hybrid"
        return "sliding-window" if self.partial else "attention"


def memory_layout(info) -> MemoryLayout:
    """The layout of a model from its ``ModelInfo`` (n_swa, recurrent, hybrid)."""
    if getattr(info, "recurrent", False):
        return MemoryLayout(partial=True, cells=False, holders=False)
    if getattr(info, "hybrid", False):
        return MemoryLayout(partial=True, cells=True, holders=False)
    return MemoryLayout(partial=info.n_swa > 0)


def speculation_refusal(info) -> str | None:
    """Why speculative decoding cannot run on this model, or None.

    Verifying drafts trims the target's memory to the accepted length after every step;
    a recurrent state cannot be trimmed, so each step would need a checkpoint before the
    drafts and a recomputation of the accepted ones: more work than decoding plainly.
    """
    layout = memory_layout(info)
    if not layout.holders:
        return (f"speculative decoding needs memory that can be cut back after a rejected draft; "
                f"this model is {layout.kind} (its state cannot be trimmed): start it without --draft")
    return None


class Checkpoints:
    """Where to take checkpoints, and taking and restoring them, for one model's memory."""

    def __init__(self, memory: KVMemory, store: HostCache, block_size: int, every_blocks: int = 32) -> None:
        self.memory = memory  # the KV cache manager's: state_seq_save / state_seq_load (partial), seq_pos_max
        self.store = store
        self.block_size = block_size
        self.every = every_blocks * block_size
        self.saved = 0
        self.restored = 0

    def _wanted(self, request: Request, pos: int) -> bool:
        return pos > 0 and pos <= request.prompt_len and (
            pos % self.every == 0 or pos == self._last(request))

    def _last(self, request: Request) -> int:
        """The prompt's checkpoint at its end: the last block boundary before its last token
        (a client that appends text often changes how that token is tokenized)."""
        return (request.prompt_len - 1) // self.block_size * self.block_size

    def cut(self, request: Request, n: int) -> int:
        """How many of the next ``n`` tokens to compute this step, so the chunk ends on the
        next checkpoint position when one falls inside it."""
        start = request.num_computed
        end = min(start + n, request.prompt_len)
        nxt = min((start // self.every + 1) * self.every, self._last(request))
        if start < nxt < end:
            return nxt - start
        return n

    def after_compute(self, request: Request) -> None:
        """Save a checkpoint when the request's computed tokens end on a checkpoint position."""
        pos = request.num_computed
        if request.seq_id is None or not self._wanted(request, pos):
            return
        k = pos // self.block_size
        if len(request.block_hashes) < k:
            return
        if self.store.has_checkpoint(request.block_hashes[k - 1], k):
            return
        if self.memory.seq_pos_max(request.seq_id) != request.pos_of(pos - 1):
            return  # drafted cells past it: the state is not the prefix's
        # one inside a long prompt is there in case a later prompt parts there: on disk alone
        self.save(request.seq_id, request.block_hashes[:k], memory=pos == self._last(request))

    def save(self, seq: int, hashes: list[int], shared: bool = False, memory: bool = True) -> None:
        """Save the checkpoint of the prefix ``hashes`` that ``seq`` holds exactly now
        (``shared``: where two prompts part, ``kv_cache_manager.py``; not ``memory``: on the
        disk tier alone where there is one)."""
        data = self.memory.state_seq_save(seq, partial=True)
        if self.store.put_checkpoint(hashes[-1], len(hashes), data, shared, memory):
            self.saved += 1

    def restore(self, seq: int, entry: HostEntry) -> bool:
        """Put the checkpoint's partial state into ``seq``, whose other cells hold the prefix."""
        if not self.memory.state_seq_load(seq, entry.data, partial=True):
            return False
        self.restored += 1
        return True
