"""A reasoning budget: after so many tokens inside the thinking block, the engine closes it.

Reasoning models (Qwen 3, DeepSeek-R1 distills, ...) write ``<think> ... </think>`` before their
answer. A client's budget (Anthropic ``thinking.budget_tokens``, OpenAI ``reasoning_effort``)
bounds that part: :meth:`ReasoningBudget.observe` sees each generated token's text and, once the
block has taken the budget without closing, returns the tokens of the closing marker, which the
engine appends to the request as if the model had written them (they are computed with its next
step, and the answer follows them), as llama-server's reasoning budget does.
"""

from __future__ import annotations

from typing import Any


class ReasoningBudget:
    """``markers``: the block's opening and closing text; ``opened``: the prompt opened it;
    ``closing``: the tokens to append when the budget runs out (the closing marker, with the line
    breaks templates put around it)."""

    __slots__ = ("budget", "open_marker", "close_marker", "closing", "state", "used", "_text")

    def __init__(self, budget: int, markers: tuple[str, str], opened: bool, closing: list[int]) -> None:
        self.budget = budget
        self.open_marker, self.close_marker = markers
        self.closing = closing
        #: "before" (the reply may still open the block), "inside", "done" (closed or never opened)
        self.state = "inside" if opened else "before"
        self.used = 0
        self._text = ""  # what is needed to recognise a marker: the reply's start, or the tail

    def observe(self, piece: str) -> list[int]:
        """The text of the next generated token; the tokens to force after it (usually none)."""
        if self.state == "done":
            return []
        self._text += piece
        if self.state == "before":
            head = self._text.lstrip()
            if head.startswith(self.open_marker):
                self.state, self._text = "inside", head[len(self.open_marker):]
            elif head and not self.open_marker.startswith(head):
                self.state = "done"
            return []
        if self.close_marker in self._text:
            self.state = "done"
            return []
        self._text = self._text[-len(self.close_marker):]
        self.used += 1
        if self.used < self.budget:
            return []
        self.state = "done"
        return list(self.closing)


def closing_tokens(backend: Any, close: str) -> list[int]:
    """The tokens of the block's end as a continuation of the output (``\n</think>\n\n``), without
    the leading space that SentencePiece vocabularies put before a text's first word."""
    text = f"\n{close}\n\n"
    tokens = backend.tokenize(text, add_special=False)
    while tokens and backend.token_bytes(tokens[0]) == b" ":
        tokens = tokens[1:]
    return tokens


def force(request: Any, tokens: list[int], backend: Any) -> tuple[str, bool, int]:
    """Append ``tokens`` to ``request`` as if sampled: they are computed with its next step.
    Returns their text, whether a stop string hit, and how many were appended; raises the
    constraint's ``ConstraintError`` when the request's constraint refuses them."""
    text, hit, n, c = "", False, 0, request.constraint
    for token in tokens:
        piece = backend.token_bytes(token)
        if c is not None:
            c.advance(token, piece)
        request.tokens.append(token)
        request.sampler.accept(token)
        n += 1
        more, hit = request.detok.push(piece)
        text += more
        if hit:
            break
    return text, hit, n
