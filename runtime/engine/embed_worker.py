"""The embedding worker process: one encoder model (ONNX Runtime or llama.cpp), jobs over a pipe.

Jobs that arrive while a batch runs queue in the pipe; the next round takes every queued job
at once and runs their inputs together (sorted by length, in batches of ``batch_size``):
concurrent requests share batches. A crash inside ONNX Runtime or llama.cpp ends this process,
not the service, which fails the waiting requests and starts the worker again on the next one.
"""

from __future__ import annotations

import os
from multiprocessing.connection import Connection

import numpy as np

from runtime.engine.embed_messages import EmbedDone, EmbedFailed, EmbedJob, EmbedSpec
from runtime.engine.messages import Loaded, LoadFailed, Shutdown
from runtime.engine.protocol import ErrorCode

#: jobs taken from the pipe for one round at most
MAX_JOBS = 256


def load(spec: EmbedSpec):
    """The backend embedder for ``spec`` and the model's settings (for ``Loaded.info``)."""
    # the tokenizer's thread pool (rayon) is bounded like the model's: a chat model keeps its cores
    os.environ.setdefault("RAYON_RS_NUM_CPUS", str(max(1, spec.threads)))
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
    def __init__(self, conn: Connection, embedder) -> None:
        self.conn, self.embedder = conn, embedder

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

    def run(self, jobs: list[EmbedJob]) -> None:
        for op in ("embed", "score"):
            ready = [(j, enc) for j in jobs if j.op == op for enc in [self._encode(j)] if enc is not None]
            if not ready:
                continue
            flat = [x for _, enc in ready for x in enc]
            try:
                out = self.embedder.embed(flat) if op == "embed" else self.embedder.score(flat)
            except Exception as x:  # noqa: BLE001
                for j, _ in ready:
                    self._fail(j, f"the model failed on this batch: {x}", ErrorCode.REQUEST_FAILED)
                continue
            start = 0
            for j, enc in ready:
                part = np.ascontiguousarray(out[start:start + len(enc)], dtype=np.float32)
                start += len(enc)
                self.conn.send(EmbedDone(j.request_id, part.tobytes(), part.shape, sum(len(x.ids) for x in enc),
                                         len(ready)))


def worker_main(conn: Connection, spec: EmbedSpec) -> None:
    try:
        embedder, info = load(spec)
    except Exception as e:  # noqa: BLE001
        conn.send(LoadFailed(f"could not load {spec.model_id}: {e}", ErrorCode.LOAD_FAILED.value))
        return
    conn.send(Loaded(os.getpid(), info["max_length"], info["max_length"], info))
    worker = _Worker(conn, embedder)
    while True:
        try:
            jobs = [conn.recv()]
            while len(jobs) < MAX_JOBS and conn.poll(0):
                jobs.append(conn.recv())
        except (EOFError, OSError):
            return
        stop = any(isinstance(j, Shutdown) for j in jobs)
        worker.run([j for j in jobs if isinstance(j, EmbedJob)])
        if stop:
            return
