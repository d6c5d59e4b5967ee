"""The service's constraint compiler: grammars and schemas are compiled in a helper process.

Compiling a caller's JSON schema, regular expression or grammar runs native code (llguidance)
on input an attacker chooses: a long enough chain of ``$ref`` hops or Lark rules overflows its
stack and kills the process that runs it. So the service never runs it: one helper process
(spawned on first use, kept warm and reused) compiles one job at a time
(``constraint_helper``), and the service awaits the answer without blocking its event loop.

- A job that passes ``COMPILE_BUDGET_S`` kills the helper: that request gets a 400 naming the
  limit, and the next job starts a fresh helper.
- A helper that dies (a segfault in the library) costs only the job it was running: a 400
  ("... crashed the grammar compiler: simplify it"), and the next job starts a fresh helper.
- Results are cached by the job's content, errors included, so an agent's tools (the same
  twenty-odd schemas on every request) are compiled once, and a schema that crashed the helper
  does not crash it again.
- Jobs wait their turn (at most ``MAX_WAITING``; more is a 503 to retry). A job whose client
  went away still finishes, so the helper is never left half-way through an abandoned job.

First use is safe under concurrency: the helper is created under the same lock that orders the
jobs.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import multiprocessing as mp
import pickle
from collections import OrderedDict
from typing import cast

from runtime.engine.constraint_spec import ConstraintError
from runtime.engine.worker_pipe import WorkerPipe
from runtime.server.generate.constraint_jobs import CompileJob, CompileResult, HelperReady, ToolsJob

log = logging.getLogger("hearth.server")

#: the most seconds one compilation may take, and the more a request's tools may add, each (an
#: agent's 25 tools take about a second to check and compile, once: the result is cached)
COMPILE_BUDGET_S = 5.0
PER_TOOL_S = 0.1
#: the most seconds the helper may take to start (a spawned interpreter loading the library)
START_BUDGET_S = 60.0
#: jobs waiting for the helper; one more is refused (503) until some are done
MAX_WAITING = 64
#: compiled results kept, by count and by grammar bytes
CACHE_ENTRIES = 512
CACHE_BYTES = 64 * 1024 * 1024

TIMEOUT = "constraint_timeout"
CRASHED = "constraint_crashed"


class CompilerBusy(Exception):
    """More jobs are waiting for the helper than ``MAX_WAITING``."""


class CompilerUnavailable(Exception):
    """The helper process could not be started (nothing about the job: it is not cached)."""


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


class ConstraintCompiler:
    """Compiles :class:`CompileJob` / :class:`ToolsJob` in the helper process (see the module doc)."""

    def __init__(self, budget_s: float = COMPILE_BUDGET_S) -> None:
        self.budget_s = budget_s
        self.started = 0  #: helpers started (the first, then one after each crash or timeout)
        self._cache: OrderedDict[bytes, CompileResult] = OrderedDict()
        self._cache_bytes = 0
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._helper: _Helper | None = None
        self._next_id = 0
        self._waiting = 0

    @property
    def pid(self) -> int | None:
        """The running helper's process id (None when none runs)."""
        h = self._helper
        return h.process.pid if h is not None and h.alive else None

    async def compile(self, job: CompileJob | ToolsJob) -> CompileResult:
        """The job's result (its ``error`` set for anything the client should hear about);
        raises :class:`CompilerBusy` when too many jobs wait, :class:`CompilerUnavailable` when
        the helper cannot be started."""
        # pickled once, on the loop: the cache's key and what the helper reads (a big schema's one
        # linear pass here; its size and everything else are measured in the helper)
        payload = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
        key = hashlib.sha256(payload).digest()
        hit = self._cached(key)
        if hit is not None:
            return hit
        if self._waiting >= MAX_WAITING:
            raise CompilerBusy(f"{self._waiting} constraints are waiting to be compiled: retry in a few seconds")
        self._waiting += 1
        # shielded: a job whose client left still runs to its end (and is cached)
        return await asyncio.shield(self._in_turn(job, payload, key))

    async def _in_turn(self, job: CompileJob | ToolsJob, payload: bytes, key: bytes) -> CompileResult:
        try:
            async with self._lock_here():
                hit = self._cached(key)
                if hit is not None:
                    return hit
                result = await self._run(job, payload)
                for note in result.notes:
                    log.info("constraint compiler (%s): %s", _param(job), note)
                if result.error is None or result.error.code != TIMEOUT:
                    self._store(key, result)
                return result
        finally:
            self._waiting -= 1

    def _lock_here(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a new event loop (tests): a new lock and helper
            self.close()
            self._loop, self._lock = loop, asyncio.Lock()
        assert self._lock is not None  # made with its loop, just above or on an earlier call
        return self._lock

    async def _run(self, job: CompileJob | ToolsJob, payload: bytes) -> CompileResult:
        param = _param(job)
        try:
            helper = await self._ready_helper()
        except (_HelperGone, asyncio.TimeoutError, OSError):
            log.exception("the grammar compiler could not be started")
            self.close()
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
            self.close()
            return CompileResult(error=ConstraintError(
                f"'{param}' could not be compiled within {budget:g} s: simplify it", param, TIMEOUT))
        except (_HelperGone, OSError):
            log.warning("a constraint for %s crashed the grammar compiler (exit code %s): it was restarted",
                        param, helper.process.exitcode)
            self.close()
            return CompileResult(error=ConstraintError(
                f"'{param}' crashed the grammar compiler: simplify it", param, CRASHED))
        finally:
            helper.pending = None

    def budget_for(self, job: CompileJob | ToolsJob) -> float:
        """Seconds ``job`` may take: ``budget_s``, and ``PER_TOOL_S`` more per tool."""
        return self.budget_s + (PER_TOOL_S * len(job.tools) if isinstance(job, ToolsJob) else 0.0)

    async def _ready_helper(self) -> _Helper:
        if self._helper is None or not self._helper.alive:
            self._helper = _Helper(asyncio.get_running_loop())
            self.started += 1
        await asyncio.wait_for(asyncio.shield(self._helper.ready), START_BUDGET_S)
        return self._helper

    def close(self) -> None:
        """End the helper (the next job starts another)."""
        if self._helper is not None:
            self._helper.kill()
            self._helper = None

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


def _param(job: CompileJob | ToolsJob) -> str:
    return (job.param or job.kind) if isinstance(job, CompileJob) else "tools"


_COMPILER = ConstraintCompiler()


def compiler() -> ConstraintCompiler:
    """The service's compiler (one per process; its helper starts on first use)."""
    return _COMPILER
