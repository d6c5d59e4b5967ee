"""Logprobs on the wire: request fields, and the engine's entries in each API's shape.

- OpenAI chat: ``logprobs: true`` and ``top_logprobs: 0..20``; each choice (and each
  streamed delta) carries ``logprobs.content``: ``[{token, logprob, bytes, top_logprobs}]``.
- OpenAI completions (legacy): ``logprobs: N`` (0..20; OpenAI stops at 5) alternatives per
  token, with ``echo`` also over the prompt, whose first token has ``null``; the choice
  carries ``logprobs: {tokens, token_logprobs, top_logprobs, text_offset}``.
- Ollama ``/api/chat`` and ``/api/generate``: ``logprobs: true``, ``top_logprobs: 0..20``;
  each line carries ``logprobs: [{token, logprob, bytes, top_logprobs}]`` for its tokens.

The numbers are the model's raw softmax (``runtime/engine/logprobs.py``). Every sampled
token gets an entry, the end-of-generation token and a stop string's tokens included, so
the entries match ``completion_tokens``; a special token is named by its own spelling
(``<|im_end|>``) and adds nothing to ``text_offset``.
"""

from __future__ import annotations

import codecs
import math
from typing import Any

from runtime.engine.logprobs import TokenLogprob
from runtime.sampling_params import MAX_TOP_LOGPROBS as MAX_TOP
from runtime.server.errors import bad_request
from runtime.server.validation import boolean, integer

#: what OpenAI writes for a probability that is 0 in float arithmetic (JSON has no -Infinity)
FLOOR = -9999.0


def parse_chat_logprobs(body: dict) -> tuple[bool, int]:
    """``(logprobs, top_logprobs)`` of an OpenAI chat or an Ollama body."""
    on = boolean(body, "logprobs")
    top = integer(body, "top_logprobs", 0, MAX_TOP)
    if top and not on:
        raise bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs")
    return on, top or 0


def parse_completion_logprobs(body: dict) -> int | None:
    """The legacy ``logprobs``: None (off) or the number of alternatives per token."""
    return integer(body, "logprobs", 0, MAX_TOP)


def _lp(v: float) -> float:
    return v if math.isfinite(v) else FLOOR


def _text(piece: bytes) -> str:
    return piece.decode("utf-8", errors="replace")


def _alternatives(e: TokenLogprob) -> list[dict]:
    return [{"token": _text(p), "logprob": _lp(lp), "bytes": list(p)} for _, p, lp in e.top]


def chat_content(entries: list[TokenLogprob]) -> list[dict]:
    """OpenAI chat's ``logprobs.content`` (also Ollama's ``logprobs``) for these entries."""
    return [{"token": _text(e.piece), "logprob": _lp(e.logprob if e.logprob is not None else 0.0),
             "bytes": list(e.piece), "top_logprobs": _alternatives(e)} for e in entries]


class CompletionLogprobs:
    """The legacy completions ``logprobs`` object of one choice, built as entries arrive.

    ``text_offset`` counts characters of the choice's text (the prompt first when echoed):
    an incremental UTF-8 decoder places a token that ends inside a character at that
    character's start.
    """

    def __init__(self, n_top: int, start: int = 0) -> None:
        self.n_top = n_top
        self.offset = start
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, entries: list[TokenLogprob], *, prompt: bool = False) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for e in entries:
            out["tokens"].append(_text(e.piece))
            out["text_offset"].append(self.offset)
            if e.logprob is None:
                out["token_logprobs"].append(None)
                out["top_logprobs"].append(None)
            else:
                out["token_logprobs"].append(_lp(e.logprob))
                top: dict[str, float] = {}
                for _, p, lp in e.top:
                    top.setdefault(_text(p), _lp(lp))
                out["top_logprobs"].append(top)
            if e.in_text:
                self.offset += len(self._decoder.decode(e.piece))
        return out

    @staticmethod
    def merge(parts: list[dict[str, list[Any]]]) -> dict[str, list[Any]]:
        merged: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for part in parts:
            for key, values in part.items():
                merged[key].extend(values)
        return merged


def echo_text(entries: list[TokenLogprob]) -> str:
    """The text of prompt tokens given as ids (echo without the client's string)."""
    return b"".join(e.piece for e in entries if e.in_text).decode("utf-8", errors="replace")
