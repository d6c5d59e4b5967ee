"""The engine worker process: loads one model and runs the step loop over a pipe.

A crash or an out-of-memory abort inside llama.cpp kills this process, not the service;
the service sees the pipe close and fails the waiting requests.
"""

from __future__ import annotations

import os
from pathlib import Path
from dataclasses import asdict
from multiprocessing.connection import Connection

from runtime.backends.chat_template import ChatTemplateError
from runtime.backends.errors import BackendError, ModelLoadError
from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.backends.vocab_match import vocab_mismatch
from runtime.engine.engine import CacheConfig, Engine, RequestRejected
from runtime.engine.speculator import MODEL, NGRAM, Speculator
from runtime.engine.messages import (
    Accepted, Cancel, Fatal, Loaded, LoadFailed, Rejected, Shutdown, Stats, StepResult, Submit,
    WorkerSpec,
)


class _Worker:
    def __init__(self, conn: Connection, backend: LlamaBackend, spec: WorkerSpec,
                 speculator: Speculator | None = None) -> None:
        self.conn = conn
        self.backend = backend
        cache = CacheConfig(spec.block_size, spec.prefix_cache, spec.cache_fraction, spec.cache_ram_mib)
        self.engine = Engine(backend, spec.parallel, cache, speculator)

    def handle(self, msg: object) -> bool:
        """Apply one message; False means stop."""
        if isinstance(msg, Submit):
            self._submit(msg)
        elif isinstance(msg, Cancel):
            self.engine.cancel(msg.request_id)
        elif isinstance(msg, Shutdown):
            return False
        return True

    def _submit(self, msg: Submit) -> None:
        try:
            extra_stop: list[str] = []
            if msg.messages is not None:
                tokens = self.backend.chat_prompt(msg.messages, **(msg.template_vars or {}))
                extra_stop = self.backend.chat_template.stop
            elif msg.tokens is not None:
                tokens = msg.tokens
            else:
                tokens = self.backend.tokenize(msg.prompt or "", add_special=True, parse_special=False)
            bad = [t for t in tokens if not 0 <= t < self.backend.n_vocab]
            if bad:
                raise RequestRejected(f"token id {bad[0]} is outside the vocabulary (0..{self.backend.n_vocab - 1})")
            self.engine.add_group(msg.request_id, tokens, msg.params, msg.n, extra_stop, msg.constraint)
        except (RequestRejected, ChatTemplateError) as e:
            self.conn.send(Rejected(msg.request_id, str(e)))
            return
        self.conn.send(Accepted(msg.request_id, len(tokens)))

    def run(self) -> None:
        conn, engine = self.conn, self.engine
        while True:
            if not engine.has_work():
                conn.send(Stats(engine.stats()))
                if not self.handle(conn.recv()):
                    return
            while conn.poll():
                if not self.handle(conn.recv()):
                    return
            if engine.has_work():
                outputs = engine.step()
                if outputs:
                    conn.send(StepResult(outputs, engine.stats()))


def load_speculator(backend: LlamaBackend, draft: str | None, config: ContextConfig,
                    draft_id: str | None = None) -> Speculator | None:
    """The speculator for ``--draft``: a draft model file (a second context, same settings),
    "ngram" (prompt lookup), or None. ModelLoadError when the draft cannot serve this target."""
    if not draft:
        return None
    if draft == NGRAM:
        return Speculator(backend, None, default=NGRAM)
    model = LlamaBackend(draft, config)
    why = vocab_mismatch(backend, model)
    if why is not None:
        model.close()
        raise ModelLoadError(f"draft model {Path(draft).name} refused: {why}")
    names = tuple(n for n in (draft_id, Path(draft).name, draft) if n)
    return Speculator(backend, model, default=MODEL, draft_names=names)


def worker_main(conn: Connection, spec: WorkerSpec) -> None:
    """Entry point of the spawned process."""
    config = ContextConfig(n_ctx=spec.n_ctx, n_seq_max=min(256, spec.parallel + spec.cache_seqs),
                           n_batch=spec.n_batch, n_threads=spec.n_threads, kv_type=spec.kv_type,
                           flash_attn=spec.flash_attn, n_gpu_layers=spec.n_gpu_layers)
    speculator = None
    try:
        backend = LlamaBackend(spec.model_path, config)
        try:
            speculator = load_speculator(backend, spec.draft, config, spec.draft_id)
        except ModelLoadError:
            backend.close()
            raise
    except ModelLoadError as e:
        conn.send(LoadFailed(str(e)))
        return
    worker = _Worker(conn, backend, spec, speculator)
    conn.send(Loaded(os.getpid(), backend.n_ctx, worker.engine.max_request_tokens, asdict(backend.info)))
    try:
        worker.run()
    except (EOFError, OSError):
        pass  # the service went away
    except BackendError as e:
        conn.send(Fatal(f"the engine stopped: {e}"))
    finally:
        if speculator is not None and speculator.draft is not None:
            speculator.draft.close()
        backend.close()
