"""What the KV cache manager needs of a model's memory: ``KVMemory``.

llama.cpp keeps a model's K and V (and a recurrent model's state) per sequence id; these are
the operations on it that Hearth uses. ``KVCacheManager`` (``kv_cache_manager.py``) is the only
code of the engine that calls them: the scheduler, the step and speculative verification ask
it to truncate or release a request's cells, and never reach the memory themselves.

Two implementations, both structural (neither imports this module, so ``runtime/backends/``
stays free of the engine): ``runtime.backends.llama.LlamaBackend`` (one llama.cpp context), and
``runtime.engine.draft_mirror.DraftMirror`` (the target's memory, with every change repeated on
a draft model's context where that keeps the draft consistent).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class KVMemory(Protocol):
    def seq_rm(self, seq_id: int, p0: int = 0, p1: int | None = None) -> bool:
        """Drop positions ``p0..p1-1`` of a sequence (``p1`` None: to the end); False when the
        memory cannot cut there (a recurrent state can only be dropped whole)."""

    def seq_cp(self, src: int, dst: int, p0: int = 0, p1: int | None = None) -> None:
        """Make ``dst`` an owner of ``src``'s cells at positions ``p0..p1-1`` (zero-copy)."""

    def seq_pos_min(self, seq_id: int) -> int | None:
        """The sequence's lowest position held, None when it holds none."""

    def seq_pos_max(self, seq_id: int) -> int | None:
        """The sequence's highest position held, None when it holds none."""

    def state_seq_save(self, seq_id: int, partial: bool = False) -> bytes:
        """The sequence's memory as bytes (``partial``: only what cannot be cut at any position)."""

    def state_seq_load(self, seq_id: int, data: bytes, partial: bool = False) -> bool:
        """Restore saved bytes into the sequence; False when refused."""
