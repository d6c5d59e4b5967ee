"""The embedding worker process: one encoder model (ONNX Runtime or llama.cpp), jobs over a pipe.

Each job is tokenized when it arrives and refused when its tokens exceed the request budget
(``EmbedSpec.max_job_tokens``); its inputs then run a batch at a time, batches shared fairly
between the jobs waiting (``runtime.engine.embed_jobs``). Between two batches the worker reads
the pipe: new jobs join, and a job whose client left (``EmbedCancel``) is dropped. A crash
inside ONNX Runtime or llama.cpp ends this process, not the service, which fails the waiting
requests and starts the worker again on the next one.
"""

from __future__ import annotations

import os
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from runtime.engine.embed_jobs import ActiveJob, FairQueue
from runtime.engine.embed_messages import EmbedCancel, EmbedDone, EmbedFailed, EmbedJob, EmbedSpec
from runtime.engine.messages import Loaded, LoadFailed, Shutdown
from runtime.engine.protocol import ErrorCode

if TYPE_CHECKING:  # imported where the worker loads one: the service never imports a backend
    from runtime.backends.llama_embedder import LlamaEmbedder
    from runtime.backends.onnx_embedder import OnnxEmbedder

#: messages read from the pipe between two batches at most
MAX_MESSAGES = 256


def load(spec: EmbedSpec):
    """The backend embedder for ``spec`` and the model's settings (for ``Loaded.info``)."""
    # the tokenizer's thread pool (rayon) is bounded like the model's: a chat model keeps its cores
    os.environ.setdefault("RAYON_RS_NUM_CPUS", str(max(1, spec.threads)))
    e: OnnxEmbedder | LlamaEmbedder
    if spec.format == "onnx":
        from runtime.backends.onnx_embedder import OnnxEmbedder
        from runtime.store.onnx_model import read_onnx_model

        info = read_onnx_model(spec.model_path, spec.overrides)
        e = OnnxEmbedder(info, threads=spec.threads, batch_size=spec.batch_size)
        d = info.to_dict() | {"dimensions": e.dimensions}
    else:
        from runtime.backends.llama_embedder import LlamaEmbedder

        e = LlamaEmbedder(spec.model_path, pooling=spec.pooling, normalize=spec.normalize, n_ctx=spec.n_ctx,
                          threads=spec.threads, n_gpu_layers=spec.n_gpu_layers, n_seq=spec.batch_size)
        d = {"kind": e.kind, "pooling": e.pooling, "normalize": e.normalize, "max_length": e.max_length,
             "dimensions": e.dimensions, "matryoshka": []}
    d |= {"format": spec.format, "threads": spec.threads, "n_vocab": e.vocab_size}
    return e, d


class _Worker:
    """Admits jobs (tokenized, within the token budget) and runs one fair batch at a time."""

    def __init__(self, conn: Connection, embedder, max_job_tokens: int) -> None:
        self.conn, self.embedder, self.max_job_tokens = conn, embedder, max_job_tokens
        self.queue = FairQueue(embedder.batch_size, embedder.batch_tokens)

    def _encode(self, job: EmbedJob):
        from runtime.backends.onnx_embedder import BadTokens, TooLong

        e = self.embedder
        try:
            if job.op == "score":
                return e.encode(job.texts, job.truncate, pairs=job.pairs)
            if job.token_rows is not None:
                return e.from_ids(job.token_rows, job.truncate)
            return e.encode(job.texts, job.truncate)
        except TooLong as x:
            self._fail(job, str(x), ErrorCode.CONTEXT_LENGTH_EXCEEDED)
        except BadTokens as x:
            self._fail(job, str(x), ErrorCode.INVALID_TOKEN)
        except Exception as x:  # noqa: BLE001  (one bad input never ends the worker)
            self._fail(job, f"could not tokenize the input: {x}", ErrorCode.INVALID_REQUEST)
        return None

    def _fail(self, job: EmbedJob, message: str, code: ErrorCode) -> None:
        self.conn.send(EmbedFailed(job.request_id, message, code.value))

    def admit(self, job: EmbedJob) -> None:
        """Tokenize the job and queue it, or refuse it (a bad input, more tokens than the budget)."""
        encoded = self._encode(job)
        if encoded is None:
            return
        n_tokens = sum(len(x.ids) for x in encoded)
        if n_tokens > self.max_job_tokens:
            self._fail(job, f"the request's {len(encoded)} inputs come to {n_tokens} tokens; the limit is "
                            f"{self.max_job_tokens} tokens per request: send them in several requests",
                       ErrorCode.CONTEXT_LENGTH_EXCEEDED)
            return
        if not encoded:
            self.conn.send(EmbedDone(job.request_id, b"", (0,), 0))
            return
        self.queue.add(ActiveJob.of(job, encoded))

    def step(self) -> None:
        """Run the next batch; answer the jobs it completes (or the jobs in it, if it fails)."""
        batch = self.queue.next_batch()
        if batch is None:
            return
        inputs = batch.inputs()
        try:
            out = self.embedder.embed(inputs) if batch.op == "embed" else self.embedder.score(inputs)
        except Exception as x:  # noqa: BLE001
            for j in self.queue.fail(batch):
                self._fail(j.job, f"the model failed on this batch: {x}", ErrorCode.REQUEST_FAILED)
            return
        for j in self.queue.finish(batch, out):
            values = j.values()
            self.conn.send(EmbedDone(j.request_id, values.tobytes(), values.shape, j.n_tokens, j.shared))


def serve(conn: Connection, worker: _Worker) -> None:
    """Read the pipe (waiting only when no job is queued) until it is empty, then run one batch;
    until ``Shutdown``. A cancel that arrived while a job was tokenized is read before the batch."""
    while True:
        try:
            for _ in range(MAX_MESSAGES):
                if worker.queue and not conn.poll(0):
                    break
                msg = conn.recv()
                if isinstance(msg, Shutdown):
                    return
                if isinstance(msg, EmbedCancel):
                    worker.queue.cancel(msg.request_id)
                elif isinstance(msg, EmbedJob):
                    worker.admit(msg)
        except (EOFError, OSError):
            return
        worker.step()


def worker_main(conn: Connection, spec: EmbedSpec) -> None:
    try:
        embedder, info = load(spec)
    except Exception as e:  # noqa: BLE001
        conn.send(LoadFailed(f"could not load {spec.model_id}: {e}", ErrorCode.LOAD_FAILED.value))
        return
    conn.send(Loaded(os.getpid(), info["max_length"], info["max_length"], info, n_vocab=info.get("n_vocab")))
    serve(conn, _Worker(conn, embedder, spec.max_job_tokens))
