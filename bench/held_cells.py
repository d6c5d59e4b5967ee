"""Decode speed of one stream while other sequences hold cached cells in the unified KV pool.

This decides whether idle prefix cache should stay on the device (``--cache-fraction``): in
a unified pool every token attends over the used cell range, other sequences' cells masked,
so held cells cost every decode. Measured for a full-attention model (SmolLM2) and a
sliding-window one (Gemma 3, window 512, created with swa_full as Hearth does), with the
held and empty runs alternated so that a busy machine slows both alike.

    python bench/held_cells.py [--held 4096] [--tokens 48] [--rounds 3] [--models gemma-3-270m]
"""

from __future__ import annotations

import argparse
import time

from common import emit, model_path


def _decode(b, seq: int, start: int, n: int) -> float:
    """Seconds for ``n`` single-token decodes of ``seq`` from position ``start``."""
    t0 = time.perf_counter()
    token = 1000 % b.n_vocab
    for i in range(n):
        b.batch.clear()
        b.batch.add([token], start + i, seq, True)
        b.decode(b.batch)
    return time.perf_counter() - t0


def _fill(b, seq: int, n: int) -> None:
    tokens = [(7 * i + 11) % (b.n_vocab - 100) + 50 for i in range(n)]
    for pos in range(0, n, b.n_batch):
        chunk = tokens[pos:pos + b.n_batch]
        b.batch.clear()
        b.batch.add(chunk, pos, seq, False)
        b.decode(b.batch)


def measure(model_id: str, held: int, tokens: int, rounds: int) -> dict:
    from runtime.backends.llama import ContextConfig, LlamaBackend

    b = LlamaBackend(model_path(model_id), ContextConfig(n_ctx=held + 1024, n_seq_max=2, n_batch=512))
    try:
        _fill(b, 0, 256)  # the stream itself: a 256-token conversation
        empty, full = [], []
        for r in range(rounds):
            base = 256 + r * tokens
            b.seq_rm(1)
            empty.append(tokens / _decode(b, 0, base, tokens))
            b.seq_rm(0, base, None)
            _fill(b, 1, held)
            full.append(tokens / _decode(b, 0, base, tokens))
            b.seq_rm(0, base + tokens, None)
        return {"model": model_id, "n_swa": b.info.n_swa, "held_cells": held,
                "tok_s_empty": round(max(empty), 1), "tok_s_held": round(max(full), 1),
                "held_over_empty": round(max(full) / max(empty), 3)}
    finally:
        b.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--held", type=int, default=4096)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", nargs="+", default=["smollm2-135m", "gemma-3-270m"])
    args = ap.parse_args()
    emit({"benchmark": "held_cells",
          "models": [measure(m, args.held, args.tokens, args.rounds) for m in args.models]})


if __name__ == "__main__":
    main()
