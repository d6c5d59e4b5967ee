"""The step loop's body: schedule, fill one batch, one llama_decode, sample, detokenize.

The engine is single-threaded (a llama.cpp context is not thread-safe) and knows nothing of
processes or HTTP: the worker wraps it with a pipe, tests drive it directly.

With a speculator (``speculator.py``), decoding requests that draft get ``1 + K`` slots:
their drafts go into the same target batch as everything else, with logits at every
drafted position, and are verified after the decode; both KV caches are then trimmed to
the accepted length, and the accepted tokens pass the same EOS / stop-string /
max_tokens checks one by one, as sampled tokens do.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from runtime.backends.errors import InvalidBatchError, NoKVSlotError
from runtime.engine.checkpoints import memory_layout
from runtime.engine.constraint import Constraint, ConstraintError, ConstraintSpec, ConstraintVocab
from runtime.engine.disk_cache import DiskCache
from runtime.engine.host_cache import default_capacity
from runtime.engine.kv_cache_manager import KVCacheManager
from runtime.engine.logprobs import Logprobs, TokenLogprob
from runtime.engine.messages import Owner
from runtime.kernels.block_hash import scope_root
from runtime.media import MediaLayout
from runtime.engine.protocol import ErrorCode
from runtime.engine.reasoning_budget import ReasoningBudget, closing_tokens, force
from runtime.engine.request import FinishReason, Request
from runtime.sampling_params import SamplingParams
from runtime.engine.scheduler import ScheduledChunk, Scheduler, SchedulerConfig
from runtime.engine.speculator import Speculator
from runtime.engine.text_stream import TextStream


from runtime.engine.outputs import (  # noqa: F401 (re-exported: the engine's outputs and errors)
    CONTEXT_LENGTH_EXCEEDED, INVALID_REQUEST, INVALID_TOKEN, REQUEST_FAILED, EngineStats, RequestOutput,
    RequestRejected,
)

#: bytes of llama.cpp's output buffer a prompt-logprobs chunk may fill (one float row per token)
OUTPUT_ROWS_BYTES = 64 << 20


@dataclass(slots=True)
class CacheConfig:
    block_size: int = 16
    prefix_cache: bool = True
    #: share of the KV blocks that unreferenced cached blocks may keep. Cells held in the
    #: unified pool slow every decode (1,024 held: -17% through the API here), so by default
    #: idle cache goes to the host tier instead (docs/architecture.md)
    cache_fraction: float = 0.0
    #: host-memory tier for cache evicted from the device (MiB); 0 turns it off; None: sized
    #: from the RAM available once the model has loaded (``host_cache.default_capacity``)
    host_mib: int | None = None
    #: models whose memory needs checkpoints (sliding window, recurrent): one every this
    #: many blocks of a long prompt, beside the one at each prompt's last block boundary
    checkpoint_blocks: int = 32


def host_tier_bytes(host_mib: int | None) -> int:
    """The host tier's budget: as configured, or a share of the RAM available now."""
    if host_mib is not None:
        return max(0, host_mib) << 20
    import psutil

    return default_capacity(int(psutil.virtual_memory().available))


class Engine:
    def __init__(self, backend, parallel: int, cache: CacheConfig | None = None,
                 speculator: Speculator | None = None, disk: DiskCache | None = None) -> None:
        """``disk``: the prompt cache's disk tier (``disk_cache.py``), owned by the caller."""
        self.backend = backend
        cache = cache or CacheConfig()
        n_ctx_train = backend.info.n_ctx_train or backend.n_ctx
        #: the most tokens (prompt + output) one request may have
        self.max_request_tokens = min(backend.n_ctx, n_ctx_train)
        #: speculative decoding (a draft model and/or prompt lookup); None: off
        self.spec = speculator
        memory = speculator.mirror if speculator is not None and speculator.mirror is not None else backend
        self.kv = KVCacheManager(
            memory, backend.n_ctx // cache.block_size, cache.block_size, backend.n_seq_max,
            prefix_cache=cache.prefix_cache, cache_fraction=cache.cache_fraction,
            n_swa=backend.info.n_swa, host_bytes=host_tier_bytes(cache.host_mib),
            layout=memory_layout(backend.info), checkpoint_every=cache.checkpoint_blocks, disk=disk,
        )
        rows = max(16, OUTPUT_ROWS_BYTES // (4 * backend.n_vocab))
        self.scheduler = Scheduler(SchedulerConfig(parallel, backend.n_batch, rows), self.kv,
                                   speculator.lookahead if speculator is not None else None)
        self.logprobs = Logprobs(backend)
        self.requests: dict[str, Request] = {}
        #: the grammar matcher's view of the vocabulary, built on the first constrained request
        self._constraint_vocab: ConstraintVocab | None = None
        self.tokens_generated = 0
        self.requests_finished = 0
        #: the requests of the step in progress (``fail_step`` ends them if it raises)
        self._stepping: list[Request] = []

    # -- requests ---------------------------------------------------------------------
    def add_request(self, request_id: str, prompt: list[int], params: SamplingParams,
                    extra_stop: list[str] | None = None, follows: Request | None = None,
                    constraint: ConstraintSpec | None = None, media: MediaLayout | None = None,
                    owner: Owner | None = None) -> Request:
        """``media``: the prompt's images and clips (their positions hold negative ids); ``owner``:
        whose it is (its place in the queue, its cache scope)."""
        limit = self.max_request_tokens
        if not isinstance(params, SamplingParams):
            raise RequestRejected("the sampling parameters are missing")
        if (why := params.problem()) is not None:
            raise RequestRejected(why)
        if not prompt:
            raise RequestRejected("the prompt is empty")
        n_vocab = self.backend.n_vocab
        lo = -(1 << 31) if media is not None and media.spans else 0  # media positions (runtime.media)
        bad = next((t for t in prompt if isinstance(t, bool) or not isinstance(t, int) or not lo <= t < n_vocab), None)
        if bad is not None:
            raise RequestRejected(f"token id {bad!r} is outside the vocabulary (0..{n_vocab - 1})", INVALID_TOKEN)
        if len(prompt) >= limit:
            raise RequestRejected(
                f"the prompt has {len(prompt)} tokens; this model's context holds {limit}: "
                "shorten the conversation, or load the model with a larger context (--ctx "
                f"{1 << (len(prompt) + 1024).bit_length()} or more, or the request's num_ctx on the Ollama API)",
                CONTEXT_LENGTH_EXCEEDED, (len(prompt), limit)
            )
        # A reply longer than the context has room for is cut where the context ends (finish
        # reason ``length``), as llama-server and OpenAI do: clients routinely ask for more
        # than they need, and refusing them would end an agent's session mid-way.
        room = limit - len(prompt)
        max_tokens = room if params.max_tokens is None else min(params.max_tokens, room)
        if params.penalty_last_n > limit:
            params = replace(params, penalty_last_n=limit)  # a window past the context adds nothing
        if request_id in self.requests:
            raise RequestRejected(f"duplicate request id {request_id}")
        request = Request(request_id, len(prompt), list(prompt), params, max_tokens)
        if owner is not None:
            request.client, request.cache_root = owner.client, scope_root(owner.cache_scope)
        if media is not None and media.spans:
            if media.span_at(len(prompt) - 1) is not None:
                raise RequestRejected("the prompt ends with an image or clip: a reply needs text after it")
            if params.prompt_logprobs:
                raise RequestRejected("prompt logprobs are not available for a prompt with images or audio")
            request.media = media
        if constraint is not None:
            try:
                request.constraint = Constraint(self.constraint_vocab(), constraint)
            except ConstraintError as e:
                raise RequestRejected(str(e)) from None
        if params.reasoning_budget is not None and params.think_markers is not None:
            request.reasoning = ReasoningBudget(params.reasoning_budget, params.think_markers, params.in_reasoning,
                                                closing_tokens(self.backend, params.think_markers[1]))
        request.sampler = self.backend.new_sampler(params)
        penalized = params.repeat_penalty != 1.0 or params.presence_penalty or params.frequency_penalty
        if penalized and params.penalty_last_n > 0:  # prompt[-0:] would be the whole prompt
            for token in prompt[-params.penalty_last_n:]:
                if token >= 0:  # not a medium's position
                    request.sampler.accept(token)
        request.detok = TextStream(params.stop + (extra_stop or []))
        if self.spec is not None and (request.reasoning is not None or request.media is not None):
            # a reasoning block's closing is appended mid-step, which drafts cannot follow; a
            # draft model cannot see a medium's embeddings
            request.spec = None  # the block's closing is appended mid-step, which drafts cannot follow
        elif self.spec is not None:
            try:
                self.spec.attach(request)
            except ValueError as e:
                request.sampler.close()
                raise RequestRejected(str(e), ErrorCode.SPECULATION_REFUSED) from None
        elif params.draft not in (None, "off"):
            request.sampler.close()
            raise RequestRejected("speculative decoding is off on this server: start it with --draft MODEL or --draft ngram",
                                  ErrorCode.SPECULATION_REFUSED)
        request.follows = follows
        self.requests[request_id] = request
        self.scheduler.add(request)
        return request

    def constraint_vocab(self) -> ConstraintVocab:
        if self._constraint_vocab is None:
            b = self.backend
            self._constraint_vocab = ConstraintVocab(b.vocab_pieces(), b.eog_tokens(), b.bos)
        return self._constraint_vocab

    def add_group(self, request_id: str, prompt: list[int], params: SamplingParams, n: int,
                  extra_stop: list[str] | None = None,
                  constraint: ConstraintSpec | None = None, media: MediaLayout | None = None,
                  owner: Owner | None = None) -> list[Request]:
        """``n`` completions of one prompt: ids ``request_id``, ``request_id/1``, ...

        The prompt is computed once; the others wait for it and take its full blocks from
        the prefix cache (only the last partial block is computed again). With a seed,
        completion ``i`` uses ``seed + i``.
        """
        first = self.add_request(request_id, prompt, params, extra_stop, constraint=constraint, media=media,
                                 owner=owner)
        group = [first]
        for i in range(1, n):
            # the prompt's logprobs come with the first completion; the others share its blocks
            p = replace(params, seed=None if params.seed is None else params.seed + i, prompt_logprobs=False)
            group.append(self.add_request(f"{request_id}/{i}", prompt, p, extra_stop, follows=first,
                                          constraint=constraint, media=media, owner=owner))
        return group

    def cancel(self, request_id: str) -> bool:
        request = self.requests.get(request_id)
        if request is None:
            return False
        self._finish(request, FinishReason.CANCELLED)
        return True

    def _finish(self, request: Request, reason: FinishReason) -> None:
        request.finish_reason = reason
        # an answer that ended is released after this step's outputs are sent (its state's save to
        # the host tier with it); a cancelled request's cells go at once
        self.scheduler.remove(request, keep_cache=reason is not FinishReason.ERROR,
                              defer=reason is not FinishReason.CANCELLED)
        request.sampler.close()
        del self.requests[request.request_id]
        self.requests_finished += 1

    def fail(self, request: Request, code: str, message: str) -> RequestOutput:
        """End one request with an error; the other requests go on."""
        if request.request_id in self.requests:
            self._finish(request, FinishReason.ERROR)
        return RequestOutput(request.request_id, "", 0, FinishReason.ERROR.value, request.cached_tokens,
                             error=message, error_code=code)

    def fail_step(self, error: Exception) -> list[RequestOutput]:
        """The step raised ``error`` outside any one request's part of it: end the requests it
        had scheduled (their cells are not trusted) and any the scheduler was moving when it
        raised (neither waiting nor running: nothing would ever answer them); keep the waiting ones."""
        message = f"the engine could not compute this request ({type(error).__name__}: {error})"
        queued = {id(r) for r in self.scheduler.waiting} | {id(r) for r in self.scheduler.running}
        stranded = [r for r in self.requests.values() if id(r) not in queued and r not in self._stepping]
        return [self.fail(r, REQUEST_FAILED, message) for r in [*self._stepping, *stranded]
                if r.request_id in self.requests]

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def release_finished(self) -> None:
        """Release the requests that ``step(hold_finished=True)`` finished (their blocks to the
        prefix cache, their state to the host tier)."""
        self.kv.flush()

    def stats(self) -> EngineStats:
        s = self.scheduler
        return EngineStats(len(s.running), len(s.waiting), self.tokens_generated, s.used_cells,
                           self.backend.n_ctx, s.num_preemptions, self.requests_finished,
                           self.kv.stats(), self.spec.as_dict() if self.spec is not None else None)

    # -- the step ---------------------------------------------------------------------
    def step(self, hold_finished: bool = False) -> list[RequestOutput]:
        """One step of every running request. ``hold_finished``: the requests it finishes are
        released by ``release_finished`` (or the next step), once their outputs are sent."""
        self.kv.flush()
        outputs = self._step()
        if not hold_finished:
            self.kv.flush()
        return outputs

    def _step(self) -> list[RequestOutput]:
        self._stepping = []
        chunks = self.scheduler.schedule()
        self._stepping = [c.request for c in chunks]
        if not chunks:
            return []
        drafts = {}
        if self.spec is not None:
            self.spec.begin_step(chunks)
            items = [(c.request, c.start, c.k) for c in chunks if c.k > 0]
            drafts = self.spec.propose(items) if items else {}
        batch = self.backend.batch
        batch.clear()
        sampled: list[tuple[Request, int]] = []
        verified: list[tuple[ScheduledChunk, int]] = []
        prompt_rows: list[tuple[ScheduledChunk, int]] = []
        media: list[ScheduledChunk] = []
        for c in chunks:
            r = c.request
            if r.media is not None and r.media.span_at(c.start) is not None:
                media.append(c)  # decoded on its own (embeddings, not tokens), before the batch
                continue
            draft = drafts.get(r)
            if draft is not None:
                first = batch.add_outputs([r.tokens[c.start]] + draft.tokens, r.pos_of(c.start), r.seq_id)
                verified.append((c, first))
                if r.wants_prompt_rows:
                    prompt_rows.append((c, first))
                continue
            if r.wants_prompt_rows:
                first = batch.add_outputs(r.tokens[c.start:c.end], r.pos_of(c.start), r.seq_id)
                prompt_rows.append((c, first))
                index = first + c.end - c.start - 1 if c.samples else None
            else:
                # text positions run on one by one from the chunk's first (a chunk holds no medium)
                index = batch.add(r.tokens[c.start:c.end], r.pos_of(c.start), r.seq_id, c.samples)
            if index is not None:
                sampled.append((r, index))
        failed = self._embeddings(media, chunks)
        t0 = time.perf_counter()
        try:
            for c in media:
                self._decode_media(c)
            if batch.n:
                self.backend.decode(batch)
        except (NoKVSlotError, InvalidBatchError) as e:
            for c in chunks:  # undo the step in the target (and in the draft, which a pass may have run ahead)
                self.kv.truncate(c.request, c.start)
            if isinstance(e, NoKVSlotError):
                return failed + self._recover_no_slot(chunks)
            return failed + self._recover_invalid_batch(chunks, e)
        if self.spec is not None:
            self.spec.observe_target(batch.n, time.perf_counter() - t0, bool(verified))
        for c in chunks:
            c.request.num_computed = c.end
            if c.request not in drafts:
                self.kv.commit(c.request)
        prompt_entries = {c.request: self._prompt_logprobs(c, first) for c, first in prompt_rows}
        outputs = failed + [self._isolated(r, self._sample, r, index) for r, index in sampled]
        outputs += [self._isolated(c.request, self._verify, c, drafts[c.request], first) for c, first in verified]
        if prompt_entries:
            outputs = self._with_prompt_logprobs(outputs, prompt_entries)
        if self.spec is not None:
            self.spec.adapt(self.scheduler.running, sum(1 for c in chunks if c.samples))
        return outputs

    def _embeddings(self, media: list[ScheduledChunk], chunks: list[ScheduledChunk]) -> list[RequestOutput]:
        """Make sure each media chunk's embeddings exist (the worker computed them before admission,
        unless the cache that held the medium's cells lost them since); a medium the projector
        fails on ends its own request, and its chunk leaves this step."""
        failed = []
        for c in list(media):
            span = c.request.media.span_at(c.start)
            try:
                span.embeddings()
            except Exception as e:  # noqa: BLE001 - the projector's failure is this request's alone
                media.remove(c)
                chunks.remove(c)
                failed.append(self.fail(c.request, REQUEST_FAILED, f"the projector failed on this request's "
                                        f"{span.kind} ({type(e).__name__}: {e})"))
        return failed

    def _decode_media(self, c: ScheduledChunk) -> None:
        """Positions ``c.start..c.end-1`` of one medium: its embeddings (the projector runs here
        only if the worker has not run it already), decoded into the request's sequence."""
        r = c.request
        assert r.media is not None and r.seq_id is not None
        span = r.media.span_at(c.start)
        assert span is not None and c.end <= span.end  # the scheduler keeps media chunks inside one span
        embd = span.embeddings()
        a, b = c.start - span.start, c.end - span.start
        pos = span.positions(r.pos_of(span.start), a, b)
        self.backend.decode_embd(embd[a:b], pos, r.seq_id, span.non_causal)

    def _prompt_logprobs(self, c: ScheduledChunk, first: int) -> list[TokenLogprob]:
        r = c.request
        entries = self.logprobs.prompt(r, c.start, min(c.end, r.prompt_len), first, r.prompt_logprobs_sent)
        r.prompt_logprobs_sent = max(r.prompt_logprobs_sent, min(c.end + 1, r.prompt_len))
        return entries

    def _with_prompt_logprobs(self, outputs: list[RequestOutput],
                              entries: dict[Request, list[TokenLogprob]]) -> list[RequestOutput]:
        """Attach this step's prompt logprobs to the request's output, or to an output of no
        tokens when the chunk sampled nothing (a prompt longer than one step)."""
        by_id = {o.request_id: o for o in outputs}
        for r, e in entries.items():
            if not e:
                continue
            out = by_id.get(r.request_id)
            if out is None:
                outputs.append(RequestOutput(r.request_id, "", 0, prompt_logprobs=e))
            else:
                out.prompt_logprobs = e
        return outputs

    def _verify(self, c: ScheduledChunk, draft, first: int) -> RequestOutput:
        """Accept a prefix of the drafts, trim both caches to it, emit the tokens in order."""
        r = c.request
        # logprobs are the raw softmax: keep the rows before verification masks a constrained one
        raw = [self.backend.logits(first + j).copy() for j in range(len(draft.tokens) + 1)] \
            if r.params.logprobs and r.constraint is not None else None
        assert self.spec is not None  # drafts are only made with a speculator
        emitted, m = self.spec.verify(r, draft, first)
        # the target computed [last, x1..xK]: keep [last, x1..xm] (the draft's cells too)
        self.kv.truncate(r, c.start + 1 + m)
        r.num_computed = c.start + 1
        self.kv.commit(r)
        # the target's rows at [last, x1..xm] gave the emitted tokens: their logprobs
        entries = [self.logprobs.entry(raw[i] if raw is not None else self.backend.logits(first + i), token,
                                       r.params.top_logprobs)
                   for i, token in enumerate(emitted)] if r.params.logprobs else None
        text, n = "", 0
        for i, token in enumerate(emitted):
            r.sampler.accept(token)
            out = self._emit(r, token, computed=i < m)
            text += out.text
            n += 1
            if out.finish_reason is not None:
                out.text, out.n_tokens = text, n
                out.logprobs = entries[:n] if entries is not None else None
                return out
        return RequestOutput(r.request_id, text, n, logprobs=entries)

    def _isolated(self, request: Request, fn, *args) -> RequestOutput:
        """``fn(*args)`` for one request; if it raises, only that request fails. The failure is
        in Python or in one request's sampler (the shared decode already succeeded), so every
        error type counts here, not only the ones we foresaw."""
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 - one request's failure must not end the others
            return self.fail(request, REQUEST_FAILED, f"sampling failed for this request ({type(e).__name__}: {e})")

    def _recover_invalid_batch(self, chunks: list[ScheduledChunk], error: Exception) -> list[RequestOutput]:
        """llama_decode refused the batch (-1) before touching the cache: end the requests whose
        tokens it cannot take (or all of them when none is found), recompute the others."""
        n_vocab = self.backend.n_vocab
        culprits = [c.request for c in chunks if (c.request.media is None or c.request.media.span_at(c.start) is None)
                    and any(not 0 <= t < n_vocab for t in c.request.tokens[c.start:c.end])]
        outputs = [self.fail(r, INVALID_TOKEN, f"a token of this request is outside the vocabulary (0..{n_vocab - 1})")
                   for r in culprits]
        if not culprits:
            outputs = [self.fail(c.request, REQUEST_FAILED, f"the engine refused this request's batch ({error})")
                       for c in chunks]
        return outputs

    def _recover_no_slot(self, chunks: list[ScheduledChunk]) -> list[RequestOutput]:
        """The pool was fuller than the accounting said (the step is undone): the least recently
        used idle holder leaves the device, else the newest request is preempted; the step runs
        again next time.

        The accounting counts the full-attention cells. Sliding-window layers keep a window of
        cells per sequence id, and cells that a prefix hit shares stay until all but one of
        their sequences let them go: idle holders are what frees them.
        A request that fails alone cannot fit at all: it ends with ``length``.
        """
        if self.kv.drop_idle_holder():
            return []
        running = self.scheduler.running
        if len(running) > 1:
            self.scheduler.preempt(running[-1])
            return []
        outputs = []
        for r in list(running):
            self._finish(r, FinishReason.LENGTH)
            outputs.append(RequestOutput(r.request_id, r.detok.flush(), 0, FinishReason.LENGTH.value,
                                         r.cached_tokens))
        return outputs

    def _sample(self, request: Request, index: int) -> RequestOutput:
        c, want = request.constraint, request.params.logprobs
        logits = self.backend.logits(index) if c is not None or want else None
        # logprobs are the model's raw softmax: read them before a constraint masks the buffer
        raw = logits.copy() if want and c is not None and logits is not None else logits
        try:
            if c is None:
                token = request.sampler.sample(self.backend.ctx, index)
            elif request.sampler.is_argmax:
                token = c.greedy(logits)
            else:
                # in the logits buffer itself: the native chain then samples the masked distribution
                c.mask_logits(logits)
                token = request.sampler.sample(self.backend.ctx, index)
        except ConstraintError as e:
            return self._fail(request, e)
        entry = self.logprobs.entry(raw, token, request.params.top_logprobs) if want and raw is not None else None
        out = self._emit(request, token)
        if entry is not None:
            out.logprobs = [entry]
        return out

    def _fail(self, request: Request, e: ConstraintError) -> RequestOutput:
        """End only this request: its constraint failed inside the engine."""
        self._finish(request, FinishReason.ERROR)
        return RequestOutput(request.request_id, request.detok.flush(), 0, FinishReason.ERROR.value,
                             request.cached_tokens, error=str(e), error_code=e.code)

    def _emit(self, request: Request, token: int, computed: bool = False) -> RequestOutput:
        """Append a sampled token; finish the request on EOS, a stop string or max_tokens.

        ``computed``: the token's KV cell exists already (an accepted draft)."""
        request.tokens.append(token)
        if computed:
            request.num_computed += 1
            self.kv.commit(request)
        self.tokens_generated += 1
        reason: FinishReason | None = None
        n_tokens = 1
        c = request.constraint
        if self.backend.is_eog(token) and not request.params.ignore_eos:
            text, reason = request.detok.flush(), FinishReason.STOP
        else:
            piece = self.backend.token_bytes(token)
            if c is not None:
                try:
                    c.advance(token, piece)
                except ConstraintError as e:
                    return self._fail(request, e)
            text, hit = request.detok.push(piece)
            if not hit and request.reasoning is not None:
                forced = request.reasoning.observe(piece.decode("utf-8", errors="ignore"))
                if forced:
                    try:
                        more, hit, n = force(request, forced, self.backend)
                    except ConstraintError as e:
                        return self._fail(request, e)
                    self.tokens_generated += n
                    text += more
                    n_tokens += n
            if hit or (c is not None and c.done):
                reason = FinishReason.STOP  # a complete constrained output ends the request
                if not hit:
                    text += request.detok.flush()
            elif request.num_output >= request.max_tokens:
                text, reason = text + request.detok.flush(), FinishReason.LENGTH
        if reason is None:
            return RequestOutput(request.request_id, text, n_tokens)
        self._finish(request, reason)
        st = request.spec
        return RequestOutput(request.request_id, text, n_tokens, reason.value, request.cached_tokens,
                             st.drafted if st else 0, st.accepted if st else 0,
                             stop_sequence=request.detok.matched)
