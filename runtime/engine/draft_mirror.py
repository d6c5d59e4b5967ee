"""The draft model's KV cache follows the target's sequences.

The KV cache manager drives the target's memory (``KVMemory``: ``seq_rm``, ``seq_cp``, saved states);
this wrapper stands in for the target there and repeats each operation on the draft
context where it keeps the draft consistent. For every sequence id it tracks ``n``: the
draft context holds that sequence's positions ``0..n-1``, computed from the same tokens as
the target's. Anything the draft lacks it computes later (the speculator catches up
before drafting), so every rule here may be conservative:

- ``seq_rm(seq, p0, p1)`` on the target drops the draft's cells from ``p0`` on (a hole in
  the middle would break the draft's contiguous prefix);
- a prefix-cache hit, ``seq_cp(src, dst, p0, p1)``, is copied zero-copy in the draft too
  when the draft holds ``src`` that far and ``dst`` up to ``p0``; otherwise the draft
  recomputes that part;
- a restore from the host tier, or of a checkpoint, restores the target only (the draft
  recomputes).

The operations take the target's positions (``runtime.media.PositionMap``). A request with
media never drafts: the draft holds at most the part of its sequence that a prefix hit copied
from a drafting one, text before its first medium, where positions are the tokens' indices.
"""

from __future__ import annotations

from runtime.engine.kv_memory import KVMemory


class DraftMirror:
    """A ``KVMemory``: the target's, repeated on the draft's (see the module's docstring)."""

    def __init__(self, target: KVMemory, draft: KVMemory, n_swa: int = 0) -> None:
        self.target = target
        self.draft = draft
        self.n_swa = n_swa
        self.n: dict[int, int] = {}  # seq -> positions the draft holds, from 0

    # -- the draft's own bookkeeping ----------------------------------------------------
    def computed(self, seq: int) -> int:
        return self.n.get(seq, 0)

    def set_computed(self, seq: int, n: int) -> None:
        self.n[seq] = n

    def trim(self, seq: int, n: int) -> None:
        """Keep the draft's positions ``0..n-1`` of ``seq``."""
        if self.n.get(seq, 0) > n:
            self.draft.seq_rm(seq, n, None)
            self.n[seq] = n

    # -- the target's memory API, repeated on the draft ---------------------------------
    def seq_rm(self, seq: int, p0: int = 0, p1: int | None = None) -> bool:
        ok = self.target.seq_rm(seq, p0, p1)
        self.trim(seq, p0)
        if p0 == 0:
            self.n.pop(seq, None)
        return ok

    def seq_cp(self, src: int, dst: int, p0: int = 0, p1: int | None = None) -> None:
        self.target.seq_cp(src, dst, p0, p1)
        end = self.n.get(src, 0) if p1 is None else p1
        if end > p0 and self.n.get(dst, 0) == p0 and self.n.get(src, 0) >= end:
            self.draft.seq_cp(src, dst, p0, end)
            self.n[dst] = end
            pos_min = self.draft.seq_pos_min(dst)
            if self.n_swa and (pos_min is None or pos_min > max(0, end - self.n_swa)):
                self.draft.seq_rm(dst, 0, None)
                self.n.pop(dst, None)

    def seq_pos_min(self, seq: int) -> int | None:
        return self.target.seq_pos_min(seq)

    def seq_pos_max(self, seq: int) -> int | None:
        return self.target.seq_pos_max(seq)

    def state_seq_save(self, seq: int, partial: bool = False) -> bytes:
        return self.target.state_seq_save(seq, partial)

    def state_seq_load(self, seq: int, data: bytes, partial: bool = False) -> bool:
        return self.target.state_seq_load(seq, data, partial)
