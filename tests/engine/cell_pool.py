"""A ``KVMemory`` without a model: llama.cpp's unified cell pool as the prefix cache sees it.

``n_ctx`` cells; a cell holds one position and the set of sequences that own it; ``seq_cp``
adds owners (zero-copy), ``seq_rm`` removes them and a cell with none is free again. A saved
state is a sequence's positions and tokens, one 16-byte record per cell (so its size grows
with the sequence, as llama.cpp's does), and loading one puts *all* of its cells in first, as
``llama_state_seq_set_data`` does: it is refused, like llama.cpp refuses it, when fewer cells
are free. ``decode`` computes a chunk of a request's tokens into new cells, or raises
``NoKVSlotError`` when the pool is full. The pool has no memory that cannot be cut (no
sliding window, no recurrent state): a ``partial`` state, a checkpoint, is only the position it
was taken at, and loading one changes nothing, so a model whose memory needs checkpoints goes
through their bookkeeping here, not through a window's.
"""

from __future__ import annotations

import struct

from runtime.backends.errors import NoKVSlotError

_CELL = struct.Struct("<qq")  # position, token
_PARTIAL = b"partial "


class CellPool:
    def __init__(self, n_ctx: int) -> None:
        self.n_ctx = n_ctx
        self.owners: dict[int, set[int]] = {}  # cell -> sequences that own it
        self.cell_pos: dict[int, tuple[int, int]] = {}  # cell -> (position, token)
        self.seqs: dict[int, dict[int, int]] = {}  # sequence -> position -> cell
        self._free = list(range(n_ctx - 1, -1, -1))
        self.loads_refused = 0

    @property
    def free_cells(self) -> int:
        return len(self._free)

    def _take(self, seq: int, pos: int, token: int) -> None:
        cell = self._free.pop()
        self.owners[cell] = {seq}
        self.cell_pos[cell] = (pos, token)
        self.seqs.setdefault(seq, {})[pos] = cell

    def decode(self, seq: int, tokens: list[int], start: int) -> None:
        """New cells for ``tokens`` at positions ``start...`` of ``seq``."""
        if len(tokens) > len(self._free):
            raise NoKVSlotError("no KV slot for the batch")
        held = self.seqs.get(seq, {})
        if held and max(held) != start - 1:
            raise AssertionError(f"sequence {seq} ends at {max(held)}, the batch starts at {start}")
        for i, token in enumerate(tokens):
            self._take(seq, start + i, token)

    def tokens(self, seq: int) -> list[int]:
        held = self.seqs.get(seq, {})
        return [self.cell_pos[held[p]][1] for p in sorted(held)]

    # -- KVMemory -----------------------------------------------------------------------
    def seq_rm(self, seq_id: int, p0: int = 0, p1: int | None = None) -> bool:
        held = self.seqs.get(seq_id, {})
        for pos in [p for p in held if p >= p0 and (p1 is None or p < p1)]:
            cell = held.pop(pos)
            self.owners[cell].discard(seq_id)
            if not self.owners[cell]:
                del self.owners[cell], self.cell_pos[cell]
                self._free.append(cell)
        return True

    def seq_cp(self, src: int, dst: int, p0: int = 0, p1: int | None = None) -> None:
        for pos, cell in self.seqs.get(src, {}).items():
            if pos >= p0 and (p1 is None or pos < p1):
                self.owners[cell].add(dst)
                self.seqs.setdefault(dst, {})[pos] = cell

    def seq_pos_min(self, seq_id: int) -> int | None:
        held = self.seqs.get(seq_id)
        return min(held) if held else None

    def seq_pos_max(self, seq_id: int) -> int | None:
        held = self.seqs.get(seq_id)
        return max(held) if held else None

    def state_seq_save(self, seq_id: int, partial: bool = False) -> bytes:
        held = self.seqs.get(seq_id, {})
        if partial:
            return _PARTIAL + struct.pack("<q", max(held, default=-1))
        return b"".join(_CELL.pack(p, self.cell_pos[held[p]][1]) for p in sorted(held))

    def state_seq_load(self, seq_id: int, data: bytes, partial: bool = False) -> bool:
        if partial:
            return data.startswith(_PARTIAL)
        self.seq_rm(seq_id)
        cells = [_CELL.unpack_from(data, i) for i in range(0, len(data), _CELL.size)]
        if len(cells) > len(self._free):
            self.loads_refused += 1
            return False
        for pos, token in cells:
            self._take(seq_id, pos, token)
        return True
