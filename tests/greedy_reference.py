"""Greedy reference outputs with their top-2 logit margins, to explain batch-shape flips.

llama.cpp's logits depend slightly on the shape of the batch a token is computed in
(docs/architecture.md), so greedy text decoded together with other requests may leave the
text decoded alone where the two best tokens were nearly tied. A test that compares the two
accepts a divergence only where the reference's margin was below ``NEAR_TIE`` logits: a
real bug (cross-talk between sequences, wrong positions, stale cells) diverges at
confident tokens and still fails.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from runtime.engine.text_stream import TextStream

NEAR_TIE = 0.5  # DESIGN measurement: max |delta logit| 0.4 for SmolLM2 across batch splits


@dataclass
class Reference:
    tokens: list[int]
    margins: list[float]
    pieces: list[str]

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def greedy_reference(backend, prompt: list[int], n: int, seq: int = 0, ignore_eos: bool = False) -> Reference:
    """Decode ``n`` greedy tokens of ``prompt`` alone on ``seq`` (which must be empty)."""
    ref = Reference([], [], [])
    text = TextStream([])
    b = backend
    b.batch.clear()
    i = b.batch.add(prompt, 0, seq, True)
    b.decode(b.batch)
    pos = len(prompt)
    for _ in range(n):
        logits = b.logits(i)
        top2 = np.partition(logits, -2)[-2:]
        token = int(logits.argmax())
        ref.margins.append(float(top2[1] - top2[0]))
        ref.tokens.append(token)
        if b.is_eog(token) and not ignore_eos:
            ref.pieces.append("")
            break
        ref.pieces.append(text.push(b.token_bytes(token))[0])
        b.batch.clear()
        i = b.batch.add([token], pos, seq, True)
        b.decode(b.batch)
        pos += 1
    b.seq_rm(seq)
    return ref


def assert_same_or_near_tie(out: str | list[int], ref: Reference, tol: float = NEAR_TIE) -> bool:
    """True if identical; if not, assert the first differing token was a near-tie.

    ``out`` is the output's token ids where the caller has them (exact), or its text. From text
    alone a divergence that starts on a token boundary is ambiguous: the output's token there
    may have merged the reference's previous one with more (`` Entry`` for `` `` then ``1``), so
    either of the two may be where they parted."""
    if isinstance(out, list):
        if out == ref.tokens[:len(out)] and len(out) == len(ref.tokens):
            return True
        k = next((k for k, (a, b) in enumerate(zip(out, ref.tokens)) if a != b), min(len(out), len(ref.tokens)))
        candidates = [k]
        shown = f"{out!r} vs {ref.tokens!r}"
    else:
        if out == ref.text:
            return True
        pos = next((k for k, (a, b) in enumerate(zip(out, ref.text)) if a != b), min(len(out), len(ref.text)))
        seen = 0
        for k, piece in enumerate(ref.pieces):
            seen += len(piece)
            if seen > pos:
                break
        on_boundary = k > 0 and seen - len(ref.pieces[k]) == pos
        candidates = [k - 1, k] if on_boundary else [k]
        shown = f"{out!r} vs {ref.text!r}"
    k = min(candidates, key=lambda j: ref.margins[j] if j < len(ref.margins) else float("inf"))
    assert k < len(ref.margins) and ref.margins[k] < tol, (
        f"output left the reference at token {candidates[-1]} where the reference was confident "
        f"(margin {ref.margins[min(candidates[-1], len(ref.margins) - 1)]:.3f}): {shown}")
    return False


def assert_greedy_throughout(backend, prompt: list[int], out: list[int], tol: float = NEAR_TIE,
                             seq: int = 0) -> int:
    """Assert that every token of ``out`` was a greedy choice given ``prompt`` and the output
    before it, computed alone on ``seq`` (empty) in one batch: the best token, or one within
    ``tol`` logits of it. Unlike a comparison with one greedy reference, a near-tie flip early
    on does not leave the rest of a long reply unchecked. Returns how many were not the best."""
    b = backend
    b.batch.clear()
    b.batch.add(prompt[:-1], 0, seq, False)
    first = b.batch.add_outputs([prompt[-1]] + out[:-1], len(prompt) - 1, seq)
    b.decode(b.batch)
    flips = 0
    try:
        for i, token in enumerate(out):
            logits = b.logits(first + i)
            best = float(logits.max())
            gap = best - float(logits[token])
            assert gap < tol, (f"output token {i} ({token}) was {gap:.3f} logits below the best "
                               f"({int(logits.argmax())}) where the context alone was confident")
            flips += gap > 0
    finally:
        b.seq_rm(seq)
    return flips
