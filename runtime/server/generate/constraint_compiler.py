"""The service's constraint compiler: grammars and schemas are compiled in helper processes.

Compiling a caller's JSON schema, regular expression or grammar runs native code (llguidance)
on input an attacker chooses: a long enough chain of ``$ref`` hops or Lark rules overflows its
stack and kills the process that runs it. So the service never runs it: a small pool of helper
processes (``HELPERS``, each spawned on first need, kept warm and reused) compiles one job each
at a time (``constraint_helper``), and the service awaits the answer without blocking its event
loop.

Before any work, a job's cost is measured (``constraint_cost``: the bytes of its schemas, by a
walk that stops at the caps): a schema or a tool list over the caps of ``schema_limits`` is a
400 naming the field before the job is pickled or queued. A small job is measured and pickled on
the event loop; a big one (``LOOP_NODES`` values, ``LOOP_BYTES`` bytes) in a thread, one big job
at a time.

Jobs wait in one queue per client (``fair_queue``; the client is ``security.client_id`` of the
request, passed in by the caller) and are handed to a free helper by least recent service. A
client runs at most ``HELPERS - 1`` jobs at once (one with two helpers), so another client's job
never waits behind the first client's queue, only, at worst, for a helper to finish the job it
is on. A big job (``SPARE_BYTES``) starts a second helper beside its own if none is up, so the
next client does not wait for an interpreter to start either. A client holds at most
``CLIENT_JOBS`` jobs and ``CLIENT_BYTES`` bytes of schemas queued or compiling; more is
``ClientBusy`` (a 429 to retry); all clients together at most ``MAX_WAITING`` waiting jobs
(``CompilerBusy``, a 503).

Measured on the project's 2-core VM: a list of 256 tools with 640 KB of parameter schemas (a
1.7 MB request body with their descriptions) takes 3.8 s to compile (about 6 s a megabyte);
before the fair queue, a second client's one-tool request waited 24-35 s behind six of them.

- A job that passes its budget (``budget_for``) kills its helper: that request gets a 400 naming
  the limit, and the next job on that helper's slot starts a fresh one.
- A helper that dies (a segfault in the library) costs only the job it was running: a 400
  ("... crashed the grammar compiler: simplify it"), and the next job starts a fresh helper.
- Results are cached by the job's content (the sha256 of the pickled job: every field of it),
  errors included, so an agent's tools (the same twenty-odd schemas on every request) are
  compiled once, and a schema that crashed a helper does not crash one again. A job identical to
  one compiling now waits for that one's result, at no cost to its client's budget; one identical
  to a job the same client has queued joins it.
- A job whose client went away still finishes (and is cached), so a helper is never left
  half-way through an abandoned job.

First use is safe under concurrency: helpers are started by the dispatcher, which runs on the
event loop between awaits.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import multiprocessing as mp
import pickle
from collections import OrderedDict
from dataclasses import dataclass
from typing import cast

from runtime.engine.constraint_spec import ConstraintError
from runtime.engine.worker_pipe import WorkerPipe
from runtime.server.generate.constraint_cost import JobCost, job_cost
from runtime.server.generate.constraint_jobs import CompileJob, CompileResult, HelperReady, ToolsJob
from runtime.server.generate.fair_queue import FairQueue
from runtime.server.generate.schema_limits import MAX_TOOLS_BYTES

log = logging.getLogger("hearth.server")

#: the most seconds one compilation may take, and the more a request's tools may add, each (an
#: agent's 25 tools take about a second to check and compile, once: the result is cached)
COMPILE_BUDGET_S = 5.0
PER_TOOL_S = 0.1
#: the most seconds a helper may take to start (a spawned interpreter loading the library)
START_BUDGET_S = 60.0
#: helper processes; a client runs at most all but one of them (tool lists of a megabyte take
#: about 6 s to compile on a 2-core VM: with one helper, a second client waited for all of them)
HELPERS = 2
#: jobs waiting for a helper, all clients together; one more is refused (503) until some are done
MAX_WAITING = 64
#: what one client may have queued or compiling: jobs (as many as its requests in flight, by
#: default), and bytes of schemas (``constraint_cost``: two tool lists at the cap, eighty of an
#: agent's); one more is refused (429). A client with nothing queued is always let in.
CLIENT_JOBS = 16
CLIENT_BYTES = 2 * MAX_TOOLS_BYTES
#: a job measured on the event loop within this many values, and no bigger than this, is pickled
#: there too (an agent's 25 tools: about 1,800 values, 1 ms); a bigger one is measured and
#: pickled in a thread (a megabyte of schemas: about 30 ms of walking, 7 ms of pickling)
LOOP_NODES = 4096
LOOP_BYTES = 64 * 1024
#: a job bigger than this (a quarter of a second or more to compile) starts a second helper
#: beside it, if none is up yet (an interpreter takes half a second to a second to start)
SPARE_BYTES = 64 * 1024
#: compiled results kept, by count and by grammar bytes
CACHE_ENTRIES = 512
CACHE_BYTES = 64 * 1024 * 1024

TIMEOUT = "constraint_timeout"
CRASHED = "constraint_crashed"


class CompilerBusy(Exception):
    """More jobs are waiting for a helper than ``MAX_WAITING``."""


class ClientBusy(Exception):
    """The client already holds its share of the compiler (``CLIENT_JOBS``, ``CLIENT_BYTES``)."""


class CompilerUnavailable(Exception):
    """A helper process could not be started (nothing about the job: it is not cached)."""


class _HelperGone(Exception):
    pass


class _Helper:
    """One helper process and its pipe; ``pending``: the job it is running (id, future)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        from runtime.server.generate.constraint_helper import helper_main

        ctx = mp.get_context("spawn")
        conn, child = ctx.Pipe()
        self.process = ctx.Process(target=helper_main, args=(child,), daemon=True, name="hearth-constraints")
        self.process.start()
        child.close()
        self.loop = loop
        self.ready: asyncio.Future = loop.create_future()
        self.pending: tuple[int, asyncio.Future] | None = None
        self.alive = True
        self.conn = conn
        self.pipe = WorkerPipe(loop, conn, self._on_message, self._on_closed)

    def _on_message(self, msg: object) -> None:
        if isinstance(msg, HelperReady):
            if not self.ready.done():
                self.ready.set_result(msg.pid)
            return
        job_id, result = cast("tuple[str, CompileResult]", msg)  # the helper's only other message
        if self.pending is not None and self.pending[0] == job_id and not self.pending[1].done():
            self.pending[1].set_result(result)

    def _on_closed(self) -> None:
        self.alive = False
        self.conn.close()  # the pipe stopped watching it; a crash every request must not leak descriptors
        for fut in (self.ready, self.pending[1] if self.pending else None):
            if fut is not None and not fut.done():
                fut.set_exception(_HelperGone())
        if not self.ready.cancelled():
            self.ready.exception()  # a spare nobody waited for ends without a "never retrieved" log
        self._reap()

    def kill(self) -> None:
        self.alive = False
        if self.process.is_alive():
            self.process.kill()
        self._reap()

    def _reap(self) -> None:
        """Collect the ended process's exit status off the loop (no zombie is left)."""
        try:
            self.loop.run_in_executor(None, self.process.join, 5)
        except RuntimeError:  # the loop is shutting down: multiprocessing reaps its children at exit
            pass


@dataclass(slots=True)
class _Slot:
    """A place in the pool: its helper (None: none started, or ended) and whether it runs a job."""

    helper: _Helper | None = None
    busy: bool = False


@dataclass(slots=True)
class _Queued:
    """A job waiting for a helper: what the helper reads, the cache's key, what its client holds
    (``cost``, bytes) and the future its callers await."""

    job: CompileJob | ToolsJob
    payload: bytes
    key: bytes
    cost: int
    future: asyncio.Future


class ConstraintCompiler:
    """Compiles :class:`CompileJob` / :class:`ToolsJob` in helper processes (see the module doc)."""

    def __init__(self, budget_s: float = COMPILE_BUDGET_S, helpers: int = HELPERS,
                 client_jobs: int = CLIENT_JOBS, client_bytes: int = CLIENT_BYTES) -> None:
        self.budget_s = budget_s
        self.helpers = max(1, helpers)
        self.client_jobs, self.client_bytes = client_jobs, client_bytes
        self.started = 0  #: helpers started (each slot's first, then one after each crash or timeout)
        self._cache: OrderedDict[bytes, CompileResult] = OrderedDict()
        self._cache_bytes = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._slots = [_Slot() for _ in range(self.helpers)]
        self._queue: FairQueue[_Queued] = self._new_queue()
        self._queued: dict[tuple[str, bytes], asyncio.Future] = {}  #: (client, key) -> a queued job's future
        self._running: dict[bytes, asyncio.Future] = {}  #: key -> the future of the job a helper runs
        self._tasks: set[asyncio.Task] = set()
        self._measuring = asyncio.Lock()  #: one big job measured at a time (remade with each event loop)
        self._epoch = 0  #: one more at each ``close``: what ran before it is not this compiler's any more
        self._next_id = 0

    def _new_queue(self) -> FairQueue[_Queued]:
        return FairQueue(self.client_jobs, self.client_bytes, max_running=max(1, self.helpers - 1))

    @property
    def pid(self) -> int | None:
        """The first running helper's process id (None when none runs): the one a lone client
        with small jobs uses."""
        pids = self.pids
        return pids[0] if pids else None

    @property
    def pids(self) -> list[int]:
        """The process ids of the helpers running now."""
        return [s.helper.process.pid for s in self._slots
                if s.helper is not None and s.helper.alive and s.helper.process.pid is not None]

    def held(self, client: str) -> tuple[int, int]:
        """(jobs, bytes) ``client`` has queued or compiling."""
        return self._queue.held(client)

    async def compile(self, job: CompileJob | ToolsJob, client: str = "") -> CompileResult:
        """The job's result (its ``error`` set for anything the client should hear about: a
        schema over the caps before anything else); ``client``: who the job counts against
        (``security.client_id``). Raises :class:`ClientBusy` when ``client`` holds its share,
        :class:`CompilerBusy` when too many jobs wait, :class:`CompilerUnavailable` when no
        helper can be started."""
        self._here()
        prepared = await self._prepared(job)
        if isinstance(prepared, CompileResult):
            return prepared  # refused by its size: nothing was pickled
        cost, payload, key = prepared
        hit = self._cached(key)
        if hit is not None:
            return hit
        # shielded: a job whose client left still runs to its end (and is cached)
        same = self._running.get(key) or self._queued.get((client, key))
        if same is not None:
            return await asyncio.shield(same)
        if len(self._queue) >= MAX_WAITING:
            raise CompilerBusy(f"{len(self._queue)} constraints are waiting to be compiled: retry in a few seconds")
        why = self._queue.refusal(client, cost.bytes)
        if why is not None:
            raise ClientBusy(f"{why}: retry when one is done")
        future = asyncio.get_running_loop().create_future()
        self._queued[(client, key)] = future
        self._queue.push(client, _Queued(job, payload, key, cost.bytes, future), cost.bytes)
        self._dispatch()
        return await asyncio.shield(future)

    def _here(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop (tests): new helpers and queue
            self.close()
            self._loop = loop
            self._measuring = asyncio.Lock()

    async def _prepared(self, job: CompileJob | ToolsJob) -> tuple[JobCost, bytes, bytes] | CompileResult:
        """The job's cost, its pickled bytes (what a helper reads) and their sha256 (the cache's
        key); or its refusal by size, before anything is pickled. A big job is measured and
        pickled in a thread, one job at a time: the walk is Python code, and more threads running
        it would take the interpreter lock from the event loop more often, not finish sooner."""
        try:
            cost = job_cost(job, LOOP_NODES)
            if cost is not None and cost.bytes <= LOOP_BYTES:
                return (cost, *_pickled(job))
            async with self._measuring:
                return await asyncio.to_thread(_measured_and_pickled, job, cost)
        except ConstraintError as e:
            return CompileResult(error=e)

    def _dispatch(self) -> None:
        """Hand queued jobs to free helpers, by the queue's order, while both are there."""
        while True:
            idle = [s for s in self._slots if not s.busy]
            if not idle:
                return
            slot = next((s for s in idle if s.helper is not None and s.helper.alive), idle[0])  # a warm one first
            picked = self._queue.pop()
            if picked is None:
                return
            client, item = picked
            self._queued.pop((client, item.key), None)
            hit = self._cached(item.key)
            same = self._running.get(item.key)
            if hit is not None or same is not None:  # done meanwhile, or compiling for another client
                self._queue.done(client, item.cost)
                if hit is not None:
                    item.future.set_result(hit)
                else:
                    _chain(cast(asyncio.Future, same), item.future)
                continue
            slot.busy = True
            self._running[item.key] = item.future
            task = asyncio.get_running_loop().create_task(self._serve(slot, client, item))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            if item.cost > SPARE_BYTES:
                self._warm_spare()

    def _warm_spare(self) -> None:
        """Start a helper in a free slot that has none, without waiting for it: a big job has
        taken one, and the next client should not wait for an interpreter to start."""
        spare = next((s for s in self._slots if not s.busy and (s.helper is None or not s.helper.alive)), None)
        if spare is not None and not any(not s.busy and s.helper is not None and s.helper.alive for s in self._slots):
            spare.helper = _Helper(asyncio.get_running_loop())
            self.started += 1

    async def _serve(self, slot: _Slot, client: str, item: _Queued) -> None:
        epoch, cancelled = self._epoch, False
        try:
            result = await self._run(slot, item.job, item.payload)
            if epoch != self._epoch:  # closed meanwhile: its helper was ended, not crashed by the job
                raise CompilerUnavailable("the grammar compiler was stopped")
            for note in result.notes:
                log.info("constraint compiler (%s): %s", _param(item.job), note)
            if result.error is None or result.error.code != TIMEOUT:
                self._store(item.key, result)
            item.future.set_result(result)
        except CompilerUnavailable as e:
            _fail(item.future, e)
        except asyncio.CancelledError:  # the loop is closing
            cancelled = True
            raise
        finally:
            if not item.future.done():
                _fail(item.future, CompilerUnavailable("the grammar compiler was stopped"))
            if epoch == self._epoch:  # else the slot, the queue and its budgets were replaced
                slot.busy = False
                self._running.pop(item.key, None)
                self._queue.done(client, item.cost)
                if not cancelled:
                    self._dispatch()

    async def _run(self, slot: _Slot, job: CompileJob | ToolsJob, payload: bytes) -> CompileResult:
        param = _param(job)
        try:
            helper = await self._ready_helper(slot)
        except (_HelperGone, asyncio.TimeoutError, OSError):
            log.exception("the grammar compiler could not be started")
            self._end(slot)
            raise CompilerUnavailable("the grammar compiler could not be started; see the service log") from None
        self._next_id += 1
        future = helper.loop.create_future()
        helper.pending = (self._next_id, future)
        try:
            helper.pipe.send((self._next_id, payload))
            return await asyncio.wait_for(future, self.budget_for(job))
        except asyncio.TimeoutError:
            budget = self.budget_for(job)
            log.warning("a constraint for %s took over %.1f s to compile: the compiler was restarted", param, budget)
            self._end(slot)
            return CompileResult(error=ConstraintError(
                f"'{param}' could not be compiled within {budget:g} s: simplify it", param, TIMEOUT))
        except (_HelperGone, OSError):
            log.warning("a constraint for %s crashed the grammar compiler (exit code %s): it was restarted",
                        param, helper.process.exitcode)
            self._end(slot)
            return CompileResult(error=ConstraintError(
                f"'{param}' crashed the grammar compiler: simplify it", param, CRASHED))
        finally:
            helper.pending = None

    def budget_for(self, job: CompileJob | ToolsJob) -> float:
        """Seconds ``job`` may take: ``budget_s``, and ``PER_TOOL_S`` more per tool."""
        return self.budget_s + (PER_TOOL_S * len(job.tools) if isinstance(job, ToolsJob) else 0.0)

    async def _ready_helper(self, slot: _Slot) -> _Helper:
        if slot.helper is None or not slot.helper.alive:
            slot.helper = _Helper(asyncio.get_running_loop())
            self.started += 1
        await asyncio.wait_for(asyncio.shield(slot.helper.ready), START_BUDGET_S)
        return slot.helper

    def _end(self, slot: _Slot) -> None:
        if slot.helper is not None:
            slot.helper.kill()
            slot.helper = None

    def close(self) -> None:
        """End the helpers and refuse the jobs waiting for them (``CompilerUnavailable``); the
        next job starts another helper."""
        self._epoch += 1
        for slot in self._slots:
            self._end(slot)
        for item in self._queue.drain():
            if not item.future.done():
                try:
                    _fail(item.future, CompilerUnavailable("the grammar compiler was stopped"))
                except RuntimeError:  # its event loop is closed: nobody waits for it
                    pass
        self._slots = [_Slot() for _ in range(self.helpers)]
        self._queue = self._new_queue()
        self._queued, self._running = {}, {}

    def _cached(self, key: bytes) -> CompileResult | None:
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
        return hit

    def _store(self, key: bytes, result: CompileResult) -> None:
        self._cache[key] = result
        self._cache_bytes += _size(result)
        while len(self._cache) > CACHE_ENTRIES or self._cache_bytes > CACHE_BYTES:
            _, old = self._cache.popitem(last=False)
            self._cache_bytes -= _size(old)


def _size(result: CompileResult) -> int:
    return 256 + (len(result.spec.grammar) if result.spec is not None else 0)


def _fail(future: asyncio.Future, error: BaseException) -> None:
    """``future`` ends with ``error``: its callers get it; one whose caller left logs nothing."""
    future.set_exception(error)
    future.exception()  # marks it retrieved


def _chain(source: asyncio.Future, target: asyncio.Future) -> None:
    """``target`` gets ``source``'s outcome when it has one."""
    def copy(done: asyncio.Future) -> None:
        if target.done():
            return
        if done.cancelled():
            _fail(target, CompilerUnavailable("the grammar compiler was stopped"))
        elif done.exception() is not None:
            _fail(target, cast(BaseException, done.exception()))
        else:
            target.set_result(done.result())

    source.add_done_callback(copy)


def _measured_and_pickled(job: CompileJob | ToolsJob, cost: JobCost | None) -> tuple[JobCost, bytes, bytes]:
    if cost is None:
        cost = cast(JobCost, job_cost(job))  # no bound on values: the caps on bytes bound the walk
    return (cost, *_pickled(job))


def _pickled(job: CompileJob | ToolsJob) -> tuple[bytes, bytes]:
    payload = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
    return payload, hashlib.sha256(payload).digest()


def _param(job: CompileJob | ToolsJob) -> str:
    return (job.param or job.kind) if isinstance(job, CompileJob) else "tools"


_COMPILER = ConstraintCompiler()


def compiler() -> ConstraintCompiler:
    """The service's compiler (one per process; its helper starts on first use)."""
    return _COMPILER
