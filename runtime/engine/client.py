"""The service's side of one engine worker: spawn it, talk to it, notice when it dies.

The pipe's file descriptor is watched by the asyncio loop itself (no reader thread: one
wake-up per step instead of two, which matters on a 2-core machine where every cycle the
service spends is taken from llama.cpp's threads); each request has a queue of outputs. If the worker exits (crash, OOM abort, killed), every
waiting request gets ``WorkerDied`` at once.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass

from runtime.engine.outputs import EngineStats, RequestOutput
from runtime.engine.messages import (
    Accepted, Cancel, Fatal, Loaded, Owner, Rejected, Stats, StepResult, Submit,
    WorkerSpec,
)
from runtime.engine.protocol import (  # noqa: F401  (the errors are part of this module's API)
    EngineError, ModelLoadFailed, PromptCount, RequestFailed, RequestRefused, ServiceStopping, WorkerDied,
)
from runtime.media import Media
from runtime.sampling_params import SamplingParams
from runtime.tool_choice import ToolChoice
from runtime.engine.worker_entry import worker_main
from runtime.engine.worker_pipe import WorkerProcess


@dataclass(slots=True)
class _Pending:
    accepted: asyncio.Future
    queue: asyncio.Queue


class RequestHandle:
    """One submitted request: ``prompt_tokens``, then its outputs by ``async for``."""

    def __init__(self, client: "EngineClient", request_id: str, pending: _Pending) -> None:
        self.client = client
        self.request_id = request_id
        self.prompt_tokens = 0
        self.dropped_messages = 0
        self.finished = False
        self._pending = pending

    def __aiter__(self) -> "RequestHandle":
        return self

    async def __anext__(self) -> RequestOutput:
        if self.finished:
            raise StopAsyncIteration
        item = await self._pending.queue.get()
        if isinstance(item, Exception):
            self.finished = True
            raise item
        if item.finish_reason is not None:
            self.finished = True
            self.client._forget(self.request_id)
            if item.error_code is not None or item.finish_reason == "error":
                raise RequestFailed(item.error or "the request failed in the engine", item.error_code)
        return item

    def ready(self) -> list[RequestOutput]:
        """Outputs already queued, without waiting (up to and including a final one)."""
        items: list[RequestOutput] = []
        queue = self._pending.queue
        while not self.finished and not queue.empty():
            item = queue.get_nowait()
            if isinstance(item, Exception) or item.error_code is not None:
                queue.put_nowait(item)  # raised by the next __anext__
                break
            if item.finish_reason == "error":
                queue.put_nowait(item)  # raised by the next __anext__
                break
            items.append(item)
            if item.finish_reason is not None:
                self.finished = True
                self.client._forget(self.request_id)
        return items

    def cancel(self) -> None:
        if not self.finished:
            self.finished = True
            self.client.cancel(self.request_id)


class EngineClient(WorkerProcess):
    """A chat model's worker (``runtime.engine.worker``), the first ``Engine``."""

    _ids = itertools.count(1)
    kind = "engine"
    worker_main = worker_main
    uses_spare = True

    def __init__(self, spec: WorkerSpec) -> None:
        super().__init__(spec)
        self.loaded: Loaded | None = None
        self.stats: EngineStats | None = None
        self._pending: dict[str, _Pending] = {}
        self._groups: dict[str, list[str]] = {}  # submitted, not yet accepted

    @property
    def active(self) -> int:
        return len(self._pending)

    def _on_message(self, msg: object) -> None:
        if isinstance(msg, StepResult):
            self.stats = msg.stats
            pending = self._pending
            for out in msg.outputs:
                p = pending.get(out.request_id)
                if p is not None:
                    p.queue.put_nowait(out)
        elif isinstance(msg, Stats):
            self.stats = msg.stats
        elif isinstance(msg, Accepted):
            self._resolve(msg.request_id, PromptCount(msg.prompt_tokens, msg.dropped_messages))
        elif isinstance(msg, Rejected):
            self._resolve(msg.request_id, RequestRefused(msg.message, msg.code, msg.sizes))
            self._drop_group(msg.request_id)
        elif isinstance(msg, Fatal):
            self.error = msg.message
        else:
            self._on_load_message(msg)

    def _resolve(self, request_id: str, value: object) -> None:
        p = self._pending.get(request_id)
        if p is None or p.accepted.done():
            return
        if isinstance(value, Exception):
            p.accepted.set_exception(value)
        else:
            p.accepted.set_result(value)

    def _fail_pending(self, err: Exception) -> None:
        """The worker is gone: every waiting request gets ``err`` at once."""
        for p in self._pending.values():
            if not p.accepted.done():
                p.accepted.set_exception(err)
            p.queue.put_nowait(err)
        self._pending.clear()

    # -- requests ---------------------------------------------------------------------
    async def submit(self, params: SamplingParams, *, prompt: str | None = None,
                     messages: list[dict] | None = None, tokens: list[int] | None = None,
                     n: int = 1, constraint=None, template_vars: dict | None = None,
                     media: list[Media] | None = None, tool_choice: ToolChoice | None = None,
                     overflow: str | None = None, owner: Owner | None = None) -> list[RequestHandle]:
        """Submit ``n`` completions of one prompt; one handle each, in choice order. ``tool_choice``
        stays here: the constraint enforces it in the worker."""
        if not self.alive:
            raise WorkerDied(self.error or "the engine worker is not running")
        request_id = f"r{next(self._ids)}"
        ids = [request_id] + [f"{request_id}/{i}" for i in range(1, n)]
        assert self._loop is not None  # alive: start() has set it
        accepted = self._loop.create_future()
        handles = []
        for rid in ids:
            pending = _Pending(accepted, asyncio.Queue())
            self._pending[rid] = pending
            handles.append(RequestHandle(self, rid, pending))
        self._groups[request_id] = ids
        try:
            self._send(Submit(request_id, params, prompt, messages, tokens, n, constraint=constraint,
                              template_vars=template_vars, media=media or None, overflow=overflow,
                              owner=owner or Owner()))
        except OSError:
            self._drop_group(request_id)
            raise WorkerDied(self.error or "the engine worker is not running") from None
        try:
            count: PromptCount = await accepted
        except asyncio.CancelledError:
            for rid in ids:
                self.cancel(rid)
            raise
        finally:
            self._groups.pop(request_id, None)
        for h in handles:
            h.prompt_tokens, h.dropped_messages = count.tokens, count.dropped_messages
        return handles

    async def count_tokens(self, *, prompt: str | None = None, messages: list[dict] | None = None,
                           media: list[Media] | None = None, overflow: str | None = None,
                           max_tokens: int | None = None) -> PromptCount:
        """The prompt's length in tokens as this model sees it (chat template included), after the
        overflow policy; nothing runs."""
        if not self.alive:
            raise WorkerDied(self.error or "the engine worker is not running")
        request_id = f"r{next(self._ids)}"
        assert self._loop is not None  # alive: start() has set it
        pending = self._pending[request_id] = _Pending(self._loop.create_future(), asyncio.Queue())
        try:
            self._send(Submit(request_id, SamplingParams(max_tokens=max_tokens), prompt, messages, count_only=True,
                              media=media or None, overflow=overflow))
            return await pending.accepted
        except OSError:
            raise WorkerDied(self.error or "the engine worker is not running") from None
        finally:
            self._pending.pop(request_id, None)

    def _drop_group(self, request_id: str) -> None:
        for rid in self._groups.pop(request_id, [request_id]):
            self._pending.pop(rid, None)

    def cancel(self, request_id: str) -> None:
        if self._pending.pop(request_id, None) is not None and self.alive:
            try:
                self._send(Cancel(request_id))
            except OSError:
                pass

    def fail_all(self, error: EngineError) -> None:
        """End every request in flight with ``error`` (each is cancelled in the worker)."""
        for rid, p in list(self._pending.items()):
            if not p.accepted.done():
                p.accepted.set_exception(error)
            p.queue.put_nowait(error)
            self.cancel(rid)

    def _forget(self, request_id: str) -> None:
        self._pending.pop(request_id, None)

