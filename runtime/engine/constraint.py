"""Constrained decoding: a per-request grammar that masks the next token's logits.

A :class:`ConstraintSpec` says what the output must match: a JSON schema, any JSON object, a
regular expression, a Lark or GBNF grammar, or a tool-call grammar built by the service. The
service has it compiled by :func:`compile_constraint` in a helper process (schema -> llguidance
grammar, checked there with :func:`check_matches`, so an invalid or unsupported one is a 400
before any worker sees it, and a grammar that crashes the library costs only the helper); the
worker turns it into a :class:`Constraint` over the model's vocabulary.

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
import logging
from collections.abc import Sequence

import numpy as np

from runtime.engine.constraint_spec import (  # noqa: F401 - the names the engine and tests import from here
    GBNF, JSON_OBJECT, JSON_OPTIONS, JSON_SCHEMA, KINDS, LARK, REGEX, ConstraintError, ConstraintSpec,
)

log = logging.getLogger("hearth.constraint")


class _Library:
    """llguidance, imported on first use: a worker or a service that never sees a constraint
    does not load it (a native library; 5 MiB and 50 ms here)."""

    def __getattr__(self, name: str):
        import llguidance

        return getattr(llguidance, name)


llg = _Library()
#: a client sees at most this much of the grammar library's own words (the log has them all)
MESSAGE_CHARS = 240


def compile_constraint(kind: str, source: object, param: str | None = None,
                       trigger: str | None = None) -> ConstraintSpec:
    """``source``: a schema (dict or JSON text) for ``json_schema``, ignored for ``json_object``,
    the pattern / grammar text otherwise. Raises :class:`ConstraintError` naming the problem.

    Native code on caller-chosen input: the service runs this only in the constraint compiler's
    helper process (``runtime.server.generate.constraint_compiler``), after the size and depth caps."""
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
        raise ConstraintError(f"invalid {kind.replace('_', ' ')}: {library_words(str(e))}", param) from None
    error = llg.LLMatcher.validate_grammar(grammar)
    if error:
        raise ConstraintError(f"unsupported or invalid {kind.replace('_', ' ')}: {library_words(error)}", param)
    return ConstraintSpec(kind, grammar, trigger)


def _text(source: object, param: str | None) -> str:
    if not isinstance(source, str) or not source:
        raise ConstraintError("the pattern or grammar must be a non-empty string", param)
    return source


def library_words(text: str) -> str:
    """The grammar library's message as a client may see it: the reason only, short. Its
    matcher state (``<state>...``), grammar dumps and source excerpts (``  3 | ...``, carets)
    are dropped; the whole text goes to the log."""
    log.info("grammar library: %s", text[:4000])
    text = text.split("<state>", 1)[0].split("<grammar>", 1)[0]
    kept = []
    for line in text.splitlines():
        s = line.strip()
        if not s or set(s) <= set("^~ -") or (s.split("|", 1)[0].strip().isdigit() and "|" in s):
            continue
        kept.append(s)
        if len(kept) == 3:
            break
    words = " ".join(kept) or "rejected by the grammar compiler"
    return words if len(words) <= MESSAGE_CHARS else words[:MESSAGE_CHARS - 3] + "..."


#: how many bytes :func:`check_matches` walks through a compiled grammar
PROBE_STEPS = 64


def check_matches(spec: ConstraintSpec, param: str | None = None) -> None:
    """Build the grammar's matcher over a vocabulary of the 256 bytes and walk it a little:
    what the library would only find once a model runs it (a rule or ``$ref`` that refers only
    to itself, a dead end on the first path) becomes a :class:`ConstraintError` now. The
    walk takes the lowest allowed byte, stops where the output may end, and costs well under
    a millisecond."""
    matcher = llg.LLMatcher(_byte_tokenizer(), spec.grammar, log_level=0)
    mask = np.zeros(_BYTE_WORDS, dtype=np.int32)
    for step in range(PROBE_STEPS):
        if matcher.is_error():
            break
        if matcher.is_stopped() or (step and matcher.is_accepting()):
            return
        matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        if matcher.is_error():
            break
        byte = np.flatnonzero(np.unpackbits(mask.view(np.uint8), bitorder="little")[:256])
        if not byte.size:
            return  # only the end is allowed
        matcher.consume_token(int(byte[0]))
    else:
        return
    log.info("grammar dead end: %s", matcher.get_error()[:4000])
    raise ConstraintError("the constraint cannot be matched by any output: a rule or $ref refers only to itself "
                          "(or leads nowhere); give every rule a way to end", param)


_BYTES: list = []
_BYTE_WORDS = (256 + 1 + 31) // 32


def _byte_tokenizer():
    if not _BYTES:
        pieces = [bytes([i]) for i in range(256)] + [b"\xff<eos>"]
        _BYTES.append(llg.LLTokenizer(llg.TokenizerWrapper(_Tokens(pieces, 256, None)), n_vocab=257, eos_token=[256]))
    return _BYTES[0]


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
            raise ConstraintError(f"the output constraint failed: {library_words(self.matcher.get_error())}",
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
        assert self.trigger is not None  # only a lazy constraint is inactive, and it has a trigger
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
