"""Speculative decoding inside the engine's step: draft, then verify with the target.

Per step, for the decoding requests that draft:

1. the scheduler reserves ``1 + K`` KV slots for each (``lookahead``, given to it at
   construction: a query, with no effect); :meth:`Speculator.begin_step` counts the step;
2. :meth:`Speculator.propose` drafts ``K`` tokens each: a draft model runs ``K`` decodes
   batched across the sequences (the first also catches the draft's cache up with the
   request's tokens), or prompt lookup finds them in the request's own tokens;
3. the engine puts ``[last, x_1..x_K]`` of every such request in the same target batch as
   everything else, with logits at every position;
4. :meth:`Speculator.verify` accepts a prefix of the drafts exactly (greedy: while they
   equal the target's argmax; sampling: rejection sampling, ``runtime/kernels/speculative``)
   and adds the target's next token;
5. the KV cache manager trims both KV caches to the accepted length (the target's through
   the draft mirror, a ``KVMemory`` that repeats it on the draft).

Each request tracks its acceptance rate, and K follows the measured costs
(``spec_costs``): drafting turns off for a request when it is expected not to pay, and is
probed again every ``PROBE_EVERY`` steps.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from runtime.backends.errors import NoKVSlotError
from runtime.engine.constraint import apply_mask
from runtime.engine.draft_mirror import DraftMirror
from runtime.engine.prompt_lookup import Found, lookup
from runtime.engine.request import Request
from runtime.engine.spec_costs import K_MAX, SpecCosts
from runtime.kernels.speculative import (
    Candidates, candidates, has_penalties, sample, verify_candidates, verify_greedy,
)

MODEL = "model"
NGRAM = "ngram"
OFF = "off"
K_START = 4
PROBE_EVERY = 32
_DECAY = 0.9
#: prior pseudo-counts of accepted / rejected drafts (a first guess of alpha = 0.75)
_PRIOR = (1.5, 0.5)
#: prompt lookup continuing a copy (``prompt_lookup.COPY_MATCH``): drafts up to this long, a
#: first guess of alpha = 0.9 and K
COPY_K_MAX = 32
_COPY_PRIOR = (4.5, 0.5)
COPY_K_START = 12


@dataclass(slots=True)
class RequestSpec:
    """One request's speculation: its mode, RNG, acceptance and chosen K."""

    mode: str
    rng: np.random.Generator
    k: int = K_START
    accepted_w: float = _PRIOR[0]
    rejected_w: float = _PRIOR[1]
    off: bool = False
    steps: int = 0
    probe_at: int = 0
    drafted: int = 0
    accepted: int = 0
    #: prompt lookup: the acceptance, K and probing of drafts that continue a copy, kept apart
    #: from the other matches' (these fields then count the short matches)
    copy: RequestSpec | None = None
    #: prompt lookup: what ``lookahead`` found, with the request's token count then
    found: tuple[int, Found | None] | None = None

    @property
    def alpha(self) -> float:
        return self.accepted_w / (self.accepted_w + self.rejected_w)

    def kind(self, copy: bool) -> RequestSpec:
        """The acceptance a draft counts in: a copy's, or this one."""
        return self.copy if copy and self.copy is not None else self


@dataclass(slots=True)
class Draft:
    """Drafted tokens of one request; ``q`` holds their draft distributions (sampling only).

    ``masks``: a constrained request's allowed-token bitmasks at each of the ``K + 1``
    verified positions (before each draft, and after the last), None when unconstrained."""

    tokens: list[int]
    q: list[Candidates] | None = None
    masks: list[np.ndarray] | None = None
    copy: bool = False  #: prompt lookup continuing a copy


def _seq(r: Request) -> int:
    """The sequence of a request being drafted for (running: admitted with one)."""
    assert r.seq_id is not None
    return r.seq_id


@dataclass(slots=True)
class SpecStats:
    mode: str
    drafted: int = 0
    accepted: int = 0
    verifications: int = 0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    k: float = 0.0
    requests_drafting: int = 0
    requests_off: int = 0
    per_k: dict[int, int] = field(default_factory=dict)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def as_dict(self) -> dict:
        return {
            "mode": self.mode, "drafted": self.drafted, "accepted": self.accepted,
            "acceptance_rate": round(self.acceptance_rate, 4), "verifications": self.verifications,
            "k": round(self.k, 2), "requests_drafting": self.requests_drafting,
            "requests_off": self.requests_off,
            "time": {"draft_s": round(self.draft_seconds, 4), "verify_s": round(self.verify_seconds, 4)},
        }


class Speculator:
    """``draft``: a second backend with the target's vocabulary, or None (prompt lookup only).

    ``default``: the mode of a request that does not choose (``model``, ``ngram`` or
    ``off``). ``fixed_k``: always draft this many tokens (no adaptation; for tests).
    """

    def __init__(self, target, draft=None, default: str = MODEL, fixed_k: int | None = None,
                 draft_names: tuple[str, ...] = ()) -> None:
        self.target = target
        self.draft = draft
        #: names a request may give the loaded draft model by (its id, its file name)
        self.draft_names = draft_names
        self.default = default if (draft is not None or default != MODEL) else OFF
        self.fixed_k = fixed_k
        self.costs = SpecCosts()
        self.mirror = DraftMirror(target, draft, draft.info.n_swa) if draft is not None else None
        self.stats = SpecStats(self.default)

    # -- requests ---------------------------------------------------------------------
    def mode_for(self, choice: str | None) -> str:
        """The mode of a request that asked for ``choice`` (None: the server's default);
        ValueError when it asks for a draft model none is loaded for."""
        if choice is None:
            return self.default
        if self.draft is not None and choice in self.draft_names:
            return MODEL
        if choice == MODEL and self.draft is None:
            raise ValueError("no draft model is loaded: start the server with --draft MODEL, "
                             "or ask for 'draft': 'ngram'")
        if choice not in (MODEL, NGRAM, OFF):
            loaded = f"this server drafts with {self.draft_names[0]}" if self.draft_names else "no draft model is loaded"
            raise ValueError(f"draft model {choice!r} is not loaded ({loaded}): ask for 'draft': true, "
                             "'ngram' or false, or start the server with --draft MODEL")
        return choice

    def attach(self, request: Request) -> None:
        mode = self.mode_for(request.params.draft)
        if mode == OFF:
            request.spec = None
            return
        seed = request.params.seed
        rng = np.random.default_rng(seed)
        copy = (RequestSpec(mode, rng, k=self.fixed_k or COPY_K_START, accepted_w=_COPY_PRIOR[0],
                            rejected_w=_COPY_PRIOR[1]) if mode == NGRAM else None)
        request.spec = RequestSpec(mode, rng, k=self.fixed_k or K_START, copy=copy)

    # -- scheduling -------------------------------------------------------------------
    def lookahead(self, request: Request, n_decoding: int) -> int:
        """Drafts to reserve KV slots for in this step (0: decode as usual). A query, with no
        effect: the scheduler may ask and then schedule less; ``begin_step`` moves the
        request's speculation state on once the step is planned."""
        st: RequestSpec | None = request.spec
        room = self._room(request)
        if st is None or room <= 0:
            return 0
        if st.mode == NGRAM:  # found now, so that K follows how long the match is
            found = lookup(request.tokens, min(room, COPY_K_MAX))
            st.found = (len(request.tokens), found)
            if found is None:
                return 0
            room = len(found.tokens)
            st = st.kind(found.copy)
        if st.off:
            return min(2, room) if st.steps + 1 >= st.probe_at else 0  # probe: a short draft measures acceptance again
        return min(st.k, room)

    def begin_step(self, chunks) -> None:
        """A step was planned: each speculating request that decodes one token in it counts
        the step, and one whose drafting is off and is probed now gets its next probe time."""
        for c in chunks:
            st: RequestSpec | None = c.request.spec
            if st is None or c.end - c.start != 1 or not self._may_draft(c.request):
                continue
            if st.mode == NGRAM:
                found = self._found(c.request)
                if found is None:
                    continue
                st = st.kind(found.copy)
            st.steps += 1
            if st.off and st.steps >= st.probe_at and self._room(c.request) > 0:
                st.probe_at = st.steps + PROBE_EVERY

    @staticmethod
    def _may_draft(request: Request) -> bool:
        c = request.constraint
        # a lazy constraint could start inside the drafts, whose masks are not known yet
        return c is None or c.active

    def _room(self, request: Request) -> int:
        if not self._may_draft(request):
            return 0
        return min(request.max_tokens - request.num_output - 1, self._ctx_room(request))

    def _ctx_room(self, request: Request) -> int:
        return self.target.n_ctx - len(request.tokens)

    # -- drafting ---------------------------------------------------------------------
    def propose(self, items: list[tuple[Request, int, int]]) -> dict[Request, Draft]:
        """Drafts for ``(request, start, k)`` items (``start``: the position of the last token)."""
        t0 = time.perf_counter()
        out: dict[Request, Draft] = {}
        model_items = []
        for r, start, k in items:
            if r.spec.mode == NGRAM:
                hit = self._found(r)
                toks = hit.tokens[:k] if hit is not None else []
                masks = None
                if toks and r.constraint is not None:
                    n, masks = r.constraint.draft_walk(toks)  # drafts the grammar forbids are cut
                    toks = toks[:n]
                if toks:
                    assert hit is not None
                    out[r] = Draft(toks, None if r.params.temperature <= 0 else
                                   [Candidates(np.array([t], dtype=np.int64), np.ones(1)) for t in toks],
                                   masks, hit.copy)
            else:
                model_items.append((r, start, k))
        passes = self._draft_model(model_items, out) if model_items else 0
        seconds = time.perf_counter() - t0
        self.stats.draft_seconds += seconds
        if passes:
            self.costs.observe_draft(passes, seconds)
        elif out:
            self.costs.observe_draft(1, seconds)
        return out

    @staticmethod
    def _found(r: Request) -> Found | None:
        """The lookup ``lookahead`` made for this step (again if the tokens moved on since)."""
        st: RequestSpec = r.spec
        if st.found is None or st.found[0] != len(r.tokens):
            st.found = (len(r.tokens), lookup(r.tokens, COPY_K_MAX))
        return st.found[1]

    def _draft_model(self, items: list[tuple[Request, int, int]], out: dict[Request, Draft]) -> int:
        d, mirror = self.draft, self.mirror
        assert mirror is not None  # drafting with a model: its mirror was made with it
        batch = d.batch
        batch.clear()
        rows: dict[Request, int] = {}
        before: dict[Request, int] = {}
        for r, start, _ in items:
            seq = _seq(r)
            n = mirror.computed(seq)
            todo = r.tokens[n:start + 1]
            before[r] = n
            if not todo or n > start:
                mirror.trim(seq, start)
                n = mirror.computed(seq)
                before[r] = n
                todo = r.tokens[n:start + 1]
            if len(todo) > batch.free:
                if batch.free > 0:  # catch up part of a long prompt; draft in a later step
                    m = batch.free
                    batch.add(todo[:m], n, seq, False)
                    mirror.set_computed(seq, n + m)
                continue
            rows[r] = batch.add(todo, n, seq, True)
            mirror.set_computed(seq, start + 1)
        if batch.n == 0:
            return 0
        try:
            d.decode(batch)
        except NoKVSlotError:
            for r, n in before.items():
                mirror.trim(_seq(r), n)
            return 0
        drafts: dict[Request, list[int]] = {r: [] for r in rows}
        qs: dict[Request, list[Candidates]] = {r: [] for r in rows}
        masks: dict[Request, list[np.ndarray]] = {r: [] for r in rows if r.constraint is not None}
        consumed: dict[Request, int] = {r: 0 for r in masks}
        want = {r: k for r, _, k in items}
        self._sample_drafts(rows, drafts, qs, masks, consumed)
        passes = 1
        for j in range(1, max((want[r] for r in rows), default=0)):
            batch.clear()
            rows = {}
            for r in drafts:
                if want[r] > j:
                    seq = _seq(r)
                    pos = mirror.computed(seq)
                    rows[r] = batch.add([drafts[r][-1]], pos, seq, True)
                    mirror.set_computed(seq, pos + 1)
            if not rows:
                break
            try:
                d.decode(batch)
            except NoKVSlotError:
                for r in rows:
                    seq = _seq(r)
                    mirror.trim(seq, mirror.computed(seq) - 1)
                break
            self._sample_drafts(rows, drafts, qs, masks, consumed)
            passes += 1
        for r in masks:  # the mask after the last draft; then back to the emitted tokens
            masks[r].append(r.constraint.compute_mask())
            r.constraint.rollback(consumed[r])
        for r, toks in drafts.items():
            out[r] = Draft(toks, qs[r] if r.params.temperature > 0 else None, masks.get(r))
        return passes

    def _sample_drafts(self, rows: dict[Request, int], drafts: dict, qs: dict, masks: dict,
                       consumed: dict) -> None:
        for r, index in rows.items():
            logits = self.draft.logits(index)
            c = r.constraint
            if c is not None:  # the draft samples the masked distribution too
                mask = c.compute_mask()  # a new array: kept for verification
                c.mask_logits(logits, mask)
                masks[r].append(mask)
            self._sample_draft(r, logits, drafts, qs)
            if c is not None and not c.matcher.is_stopped():
                c.matcher.consume_token(drafts[r][-1])
                consumed[r] += 1

    def _sample_draft(self, r: Request, logits: np.ndarray, drafts: dict, qs: dict) -> None:
        p = r.params
        if p.temperature <= 0 and not has_penalties(p):
            drafts[r].append(int(np.argmax(logits)))
            return
        q = candidates(logits, p, r.tokens + drafts[r] if has_penalties(p) else ())
        x = int(q.ids[sample(q.probs, r.spec.rng)]) if p.temperature > 0 else int(q.ids[0])
        drafts[r].append(x)
        qs[r].append(q)

    # -- verification -----------------------------------------------------------------
    def verify(self, request: Request, draft: Draft, first_index: int) -> tuple[list[int], int]:
        """Tokens to emit after the target computed ``[last, *draft.tokens]`` with logits from
        batch index ``first_index`` on; and how many drafts were accepted."""
        t0 = time.perf_counter()
        p = request.params
        xs = draft.tokens
        k = len(xs)
        if draft.masks is not None:  # p is the constrained target's: masked, renormalised
            for j in range(k + 1):
                apply_mask(self.target.logits(first_index + j), draft.masks[j])
        if p.temperature <= 0 and not has_penalties(p):
            top = [int(np.argmax(self.target.logits(first_index + j))) for j in range(k + 1)]
            m, y = verify_greedy(xs, top)
        else:
            hist = request.tokens if has_penalties(p) else []
            rows = [candidates(self.target.logits(first_index + j), p,
                               hist + xs[:j] if has_penalties(p) else ()) for j in range(k + 1)]
            if p.temperature <= 0:
                m, y = verify_greedy(xs, [int(c.ids[0]) for c in rows])
            else:
                assert draft.q is not None  # drafted at a temperature above 0: with its distributions
                m, y = verify_candidates(xs, rows, draft.q, request.spec.rng)
        self._learn(request, k, m, draft.copy)
        seconds = time.perf_counter() - t0
        self.costs.observe_verify(k + 1, seconds)
        self.stats.verify_seconds += seconds
        return xs[:m] + [y], m

    def _learn(self, request: Request, k: int, m: int, copy: bool = False) -> None:
        st: RequestSpec = request.spec
        st.drafted += k
        st.accepted += m
        s = self.stats
        s.drafted += k
        s.accepted += m
        s.verifications += 1
        s.per_k[k] = s.per_k.get(k, 0) + 1
        kind = st.kind(copy)
        kind.accepted_w = kind.accepted_w * _DECAY + m
        kind.rejected_w = kind.rejected_w * _DECAY + (1 if m < k else 0)

    def adapt(self, requests: list[Request], n_decoding: int) -> None:
        """Choose K again for the drafting requests, from their acceptance and the costs."""
        ks, off, on = [], 0, 0
        for r in requests:
            st: RequestSpec | None = r.spec
            if st is None:
                continue
            if self.fixed_k is None and self.costs.known:
                lookup_only = st.mode == NGRAM  # no draft passes: K costs the verification alone
                for kind, k_max in ((st, K_MAX), (st.copy, COPY_K_MAX)):
                    if kind is None:
                        continue
                    k, speedup = self.costs.choose(kind.alpha, n_decoding, k_max, lookup_only)
                    was_off = kind.off
                    kind.off = speedup < 1.0
                    if kind.off and not was_off:
                        kind.probe_at = kind.steps + PROBE_EVERY
                    kind.k = k
            if st.off:
                off += 1
            else:
                on += 1
                ks.append(st.k)
        self.stats.requests_off = off
        self.stats.requests_drafting = on
        if ks:
            self.stats.k = sum(ks) / len(ks)

    def observe_target(self, n_tokens: int, seconds: float, speculative: bool) -> None:
        self.costs.observe_target(n_tokens, seconds)
        if speculative:
            self.stats.verify_seconds += seconds

    def as_dict(self) -> dict:
        return self.stats.as_dict()
