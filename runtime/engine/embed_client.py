"""The service's side of one embedding worker: spawn it, send jobs, await vectors or scores.

It stands behind the same ``Engine`` interface as a chat worker (start, alive, active, close),
so the router keeps it resident beside chat models; ``submit`` refuses (an encoder generates no
text), and ``embed`` / ``score`` are what the embeddings and rerank endpoints call.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import TYPE_CHECKING

from runtime.engine.embed_messages import EmbedCancel, EmbedDone, EmbedFailed, EmbedJob, EmbedSpec
from runtime.engine.embed_worker_entry import embed_worker_main
from runtime.engine.messages import Loaded
from runtime.engine.worker_pipe import WorkerProcess
from runtime.engine.protocol import EngineError, ErrorCode, PromptCount, RequestRefused, WorkerDied


if TYPE_CHECKING:  # numpy loads with the first embedding request, not with the service
    import numpy as np

class EmbedClient(WorkerProcess):
    _ids = itertools.count(1)
    stats = None
    kind = "embedding"
    worker_main = embed_worker_main

    def __init__(self, spec: EmbedSpec) -> None:
        super().__init__(spec)
        self.loaded: Loaded | None = None
        self.jobs_done = 0
        self.inputs_done = 0
        self.tokens_done = 0
        self.shared_jobs = 0  # requests answered from a round shared with other requests
        self.cancelled = 0  # requests whose client left before the answer
        self._pending: dict[str, asyncio.Future] = {}

    @property
    def active(self) -> int:
        return len(self._pending)

    @property
    def info(self) -> dict:
        return self.loaded.info if self.loaded is not None else {}

    def _on_message(self, msg: object) -> None:
        if isinstance(msg, (EmbedDone, EmbedFailed)):
            fut = self._pending.pop(msg.request_id, None)
            if fut is not None and not fut.done():
                if isinstance(msg, EmbedDone):
                    fut.set_result(msg)
                else:
                    fut.set_exception(RequestRefused(msg.message, msg.code))
        else:
            self._on_load_message(msg)

    # -- jobs ------------------------------------------------------------------------------
    async def _job(self, job: EmbedJob) -> tuple[np.ndarray, int]:
        import numpy as np

        if not self.alive:
            raise WorkerDied(self.error or "the embedding worker is not running")
        assert self._loop is not None  # alive: start() has set it
        fut = self._pending[job.request_id] = self._loop.create_future()
        try:
            self._send(job)
        except OSError:
            self._pending.pop(job.request_id, None)
            raise WorkerDied(self.error or "the embedding worker is not running") from None
        try:
            done: EmbedDone = await fut
        except asyncio.CancelledError:  # the client left: the worker drops what has not run
            self.cancel(job.request_id)
            raise
        finally:
            self._pending.pop(job.request_id, None)
        self.jobs_done += 1
        self.inputs_done += done.shape[0] if done.shape else 0
        self.tokens_done += done.n_tokens
        self.shared_jobs += done.round_jobs > 1
        return np.frombuffer(done.values, dtype=np.float32).reshape(done.shape), done.n_tokens

    async def embed(self, texts: list[str] | None = None, token_rows: list[list[int]] | None = None,
                    truncate: bool = True) -> tuple[np.ndarray, int]:
        """([n, dim] vectors, tokens used) for the texts or the token-id rows."""
        return await self._job(EmbedJob(f"e{next(self._ids)}", "embed", texts, token_rows, None, truncate))

    async def score(self, query: str, documents: list[str], truncate: bool = True) -> tuple[np.ndarray, int]:
        """(a cross-encoder's relevance logit for each document, tokens used)."""
        return await self._job(EmbedJob(f"s{next(self._ids)}", "score", [query] * len(documents), None,
                                        list(documents), truncate))

    def counters(self) -> dict:
        """For /hearth/stats: requests answered, inputs and tokens embedded or scored, requests
        cancelled (their clients left), in flight."""
        return {"kind": self.info.get("kind"), "format": self.spec.format, "threads": self.spec.threads,
                "requests": self.jobs_done, "inputs": self.inputs_done, "tokens": self.tokens_done,
                "batched_with_others": self.shared_jobs, "cancelled": self.cancelled,
                "active": self.active}

    # -- the rest of the Engine interface ---------------------------------------------------
    async def submit(self, params, **_kw):
        raise RequestRefused(f"model {self.model_id} is an embedding model: it cannot generate text; "
                             "use /v1/embeddings (or a chat model)", ErrorCode.INVALID_REQUEST)

    async def count_tokens(self, **_kw) -> PromptCount:
        raise RequestRefused(f"model {self.model_id} is an embedding model: it has no chat template",
                             ErrorCode.INVALID_REQUEST)

    def cancel(self, request_id: str) -> None:
        """Forget the job and tell the worker to drop its inputs that have not run yet."""
        if self._pending.pop(request_id, None) is None:
            return
        self.cancelled += 1
        if self.alive:
            try:
                self._send(EmbedCancel(request_id))
            except OSError:
                pass  # the worker is gone: nothing runs the job any more

    def _fail_pending(self, error: EngineError) -> None:
        self.fail_all(error)

    def fail_all(self, error: EngineError) -> None:
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(error)
        self._pending.clear()

