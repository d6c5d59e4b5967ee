"""Constrained decoding: a per-request grammar that masks the next token's logits.

A :class:`ConstraintSpec` says what the output must match: a JSON schema, any JSON object, a
regular expression, a Lark or GBNF grammar, or a tool-call grammar built by the service. The
service compiles it with :func:`compile_constraint` (schema -> llguidance grammar, checked
there, so an invalid or unsupported one is a 400 before any worker sees it); the worker turns
it into a :class:`Constraint` over the model's vocabulary.

The library is llguidance (its matcher computes the token mask in native code, consumes
tokens, and rolls back): on this project's build machine its mask cost a few tens of
microseconds per token on SmolLM2's 49k and Gemma 3's 262k vocabularies (``bench/constrained.py``
prints the numbers beside llama.cpp's own grammar sampler).

How a constraint is used by the engine:

- before a constrained request samples, :meth:`Constraint.mask_logits` sets every token the
  grammar forbids to ``-inf`` *in the logits buffer itself*, so the native sampler chain
  (penalties, top-k, temperature, dist) and the numpy kernels see the masked, renormalised
  distribution without knowing about constraints;
- each emitted token is :meth:`Constraint.advance`\\ d; when the grammar cannot continue
  (:attr:`Constraint.done`) the request ends with ``stop``;
- under speculative decoding the draft's rows are masked the same way while drafting (the
  matcher consumes each drafted token), the mask at every drafted position is kept, and the
  matcher is rolled back to the emitted tokens; verification then masks the target's rows with
  those masks, so accept / residual are computed on masked p and q and the output is exactly
  the constrained target's.

A lazy constraint (``trigger``) lets the model write freely until its text contains the
trigger (a tool call's opening markup); from then on the grammar holds. The grammar begins with
the trigger, which it consumes on activation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import llguidance as llg
import numpy as np

JSON_SCHEMA = "json_schema"
JSON_OBJECT = "json_object"
REGEX = "regex"
LARK = "lark"
GBNF = "gbnf"
KINDS = (JSON_SCHEMA, JSON_OBJECT, REGEX, LARK, GBNF)
#: JSON is written compactly, one space after ':' and ',': a small model given free whitespace
#: can loop on newlines until max_tokens
JSON_OPTIONS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


class ConstraintError(ValueError):
    """A constraint that cannot be compiled; ``code`` is stable, ``param`` names the field."""

    def __init__(self, message: str, param: str | None = None, code: str = "invalid_constraint") -> None:
        super().__init__(message)
        self.param = param
        self.code = code


@dataclass(slots=True)
class ConstraintSpec:
    """A compiled constraint as it crosses the pipe: an llguidance grammar (JSON text).

    ``trigger``: None enforces the grammar from the first token; a string applies it lazily,
    once the output text contains the trigger (the grammar starts with the trigger itself).
    """

    kind: str
    grammar: str
    trigger: str | None = None


def compile_constraint(kind: str, source: object, param: str | None = None,
                       trigger: str | None = None) -> ConstraintSpec:
    """``source``: a schema (dict or JSON text) for ``json_schema``, ignored for ``json_object``,
    the pattern / grammar text otherwise. Raises :class:`ConstraintError` naming the problem."""
    try:
        if kind == JSON_SCHEMA:
            text = source if isinstance(source, str) else json.dumps(source)
            grammar = llg.LLMatcher.grammar_from_json_schema(text, overrides=JSON_OPTIONS)
        elif kind == JSON_OBJECT:
            grammar = llg.LLMatcher.grammar_from_json_schema('{"type": "object"}', overrides=JSON_OPTIONS)
        elif kind == REGEX:
            grammar = llg.LLMatcher.grammar_from_regex(_text(source, param))
        elif kind == LARK:
            grammar = llg.LLMatcher.grammar_from_lark(_text(source, param))
        elif kind == GBNF:
            grammar = llg.grammar_from("gbnf", _text(source, param))
        else:
            raise ConstraintError(f"unknown constraint kind {kind!r}: use one of {', '.join(KINDS)}", param)
    except ValueError as e:
        if isinstance(e, ConstraintError):
            raise
        raise ConstraintError(f"invalid {kind.replace('_', ' ')}: {e}", param) from None
    error = llg.LLMatcher.validate_grammar(grammar)
    if error:
        raise ConstraintError(f"unsupported or invalid {kind.replace('_', ' ')}: {error.strip()}", param)
    return ConstraintSpec(kind, grammar, trigger)


def _text(source: object, param: str | None) -> str:
    if not isinstance(source, str) or not source:
        raise ConstraintError("the pattern or grammar must be a non-empty string", param)
    return source


class _Tokens:
    """What llguidance's ``TokenizerWrapper`` reads: token bytes, EOS, and a tokenizer.

    The tokenizer is a greedy longest match over the token bytes: llguidance needs one only
    to turn bytes into *some* valid tokens (a lazy trigger's tail), and the model's own
    tokenizer can abort inside llama.cpp on text its vocabulary cannot spell."""

    def __init__(self, pieces: Sequence[bytes], eos: int, bos: int | None) -> None:
        self.tokens = list(pieces)
        self.eos_token_id = eos
        self.bos_token_id = bos
        self.special_token_ids = [i for i, p in enumerate(pieces) if p.startswith(b"\xff")]
        self._ids: dict[bytes, int] = {}
        for i, p in enumerate(pieces):
            if p and not p.startswith(b"\xff"):
                self._ids.setdefault(p, i)
        self._longest = max((len(p) for p in self._ids), default=1)

    def __call__(self, data: bytes) -> list[int]:
        out, i = [], 0
        while i < len(data):
            for n in range(min(self._longest, len(data) - i), 0, -1):
                t = self._ids.get(data[i:i + n])
                if t is not None:
                    out.append(t)
                    i += n
                    break
            else:
                i += 1  # a byte no token spells: skipped
        return out


class ConstraintVocab:
    """llguidance's tokenizer over one model's vocabulary: built once per model (about a
    second for 262k tokens), shared by every constrained request of that model.

    ``pieces[i]``: the bytes of token ``i``; control tokens are prefixed with ``0xff`` (as
    llguidance's own llama.cpp adapter does) so a grammar can name them (``<|tool_call|>``)
    and text never matches them. ``eos``: every end-of-generation token.
    """

    def __init__(self, pieces: Sequence[bytes], eos: Sequence[int], bos: int | None) -> None:
        tokens = _Tokens(pieces, eos[0], bos)
        wrapper = llg.TokenizerWrapper(tokens)
        self.tokenizer = llg.LLTokenizer(wrapper, n_vocab=len(pieces), eos_token=list(eos))
        self.n_vocab = len(pieces)
        self.words = (self.n_vocab + 31) // 32
        self.tokenize = tokens


class Constraint:
    """One request's matcher. ``mask_logits`` / ``advance`` / ``rollback``; ``done`` when the
    grammar cannot continue. Raises :class:`ConstraintError` (code ``constraint_failed``) if the
    matcher enters an error state, which fails only this request."""

    __slots__ = ("vocab", "matcher", "trigger", "active", "_mask", "_bits", "_seen")

    def __init__(self, vocab: ConstraintVocab, spec: ConstraintSpec) -> None:
        self.vocab = vocab
        self.matcher = llg.LLMatcher(vocab.tokenizer, spec.grammar, log_level=0)
        self._check()
        self.trigger = spec.trigger
        self.active = spec.trigger is None
        self._mask = np.zeros(vocab.words, dtype=np.int32)
        self._bits = np.zeros(vocab.words * 32, dtype=bool)
        #: lazy constraints: the text emitted so far (bytes), searched for the trigger
        self._seen = b""

    def _check(self) -> None:
        if self.matcher.is_error():
            raise ConstraintError(f"the output constraint failed: {self.matcher.get_error()}",
                                  code="constraint_failed")

    # -- masks ------------------------------------------------------------------------
    def compute_mask(self) -> np.ndarray:
        """The allowed next tokens: int32 [ceil(V/32)] bitmask (a new array)."""
        mask = np.empty(self.vocab.words, dtype=np.int32)
        self.matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        self._check()
        return mask

    def mask_logits(self, logits: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray | None:
        """Set forbidden tokens of ``logits`` (float32 [V], modified in place) to -inf.

        ``mask``: a bitmask from :meth:`compute_mask` (default: the current state's). Returns
        the mask used, or None when the constraint is not active yet (lazy)."""
        if not self.active:
            return None
        if mask is None:
            self.matcher.unsafe_compute_mask_ptr(self._mask.ctypes.data, self._mask.nbytes)
            self._check()
            mask = self._mask
        apply_mask(logits, mask, self._bits)
        return mask

    def greedy(self, logits: np.ndarray) -> int:
        """The masked argmax of ``logits``. When the plain argmax is allowed it is the answer,
        and checking one token (under a microsecond) replaces computing the whole mask."""
        token = int(logits.argmax())
        if not self.active or self.matcher.validate_tokens([token]) == 1:
            return token
        self.mask_logits(logits)
        return int(logits.argmax())

    # -- tokens -----------------------------------------------------------------------
    def advance(self, token: int, piece: bytes = b"") -> None:
        """Consume an emitted token (``piece``: its bytes, for a lazy constraint's trigger)."""
        if not self.active:
            self._watch(piece)
            return
        if self.matcher.is_stopped():
            return  # only EOS was allowed; the engine finishes the request
        self.matcher.consume_token(token)
        self._check()

    def _watch(self, piece: bytes) -> None:
        self._seen += piece
        trigger = self.trigger.encode()
        at = self._seen.find(trigger)
        if at < 0:
            self._seen = self._seen[-len(trigger) * 4:]  # enough to find a split trigger
            return
        self.active = True
        # the grammar starts with the trigger: it consumes the trigger and what followed it
        # in the same token, as some valid spelling in tokens
        self.matcher.consume_tokens(self.vocab.tokenize(self._seen[at:]))
        self._seen = b""
        self._check()

    def draft_walk(self, tokens: Sequence[int]) -> tuple[int, list[np.ndarray]]:
        """For drafted ``tokens``: how many the grammar allows in a row (``n``), and the mask at
        each of the ``n + 1`` positions (before each allowed token, and after the last). The
        matcher is left as it was."""
        masks = [self.compute_mask()]
        n = 0
        for t in tokens:
            if not allowed(masks[-1], t) or self.matcher.is_stopped():
                break
            self.matcher.consume_token(t)
            self._check()
            n += 1
            masks.append(self.compute_mask())
        self.rollback(n)
        return n, masks

    def rollback(self, n: int) -> None:
        if n > 0:
            self.matcher.rollback(n)
            self._check()

    @property
    def done(self) -> bool:
        """True when no more tokens can follow (the grammar is complete)."""
        return self.active and self.matcher.is_stopped()

    @property
    def accepting(self) -> bool:
        return not self.active or self.matcher.is_accepting()


def allowed(mask: np.ndarray, token: int) -> bool:
    return bool((int(mask[token >> 5]) >> (token & 31)) & 1)


def apply_mask(logits: np.ndarray, mask: np.ndarray, bits: np.ndarray | None = None) -> None:
    """``logits`` float32 [V] in place: -inf where the bitmask ``mask`` (int32 [ceil(V/32)])
    has a 0 bit. ``bits``: a scratch bool array of ``32 * len(mask)`` to avoid allocating."""
    n = logits.shape[0]
    unpacked = np.unpackbits(mask.view(np.uint8), bitorder="little")
    if bits is None:
        bits = np.empty(unpacked.shape[0], dtype=bool)
    np.equal(unpacked, 0, out=bits)
    np.copyto(logits, -np.inf, where=bits[:n])
