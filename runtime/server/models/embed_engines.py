"""Which task a model serves, and the embedding worker the router starts for encoder models.

A model's task follows its format: an ONNX file is an encoder (``embedding``, or ``rerank``
for a cross-encoder, see ``runtime.store.onnx_model``); a GGUF of an encoder architecture
(BERT, nomic-bert, ...) embeds, and one with rank pooling reranks, both through llama.cpp in
the embedding worker; any other GGUF generates text in the chat worker. Embedding models run
on the CPU with few threads (``$HEARTH_EMBED_THREADS``, default 2) so that a chat model decoding
beside them keeps its speed; the router counts them with a small plan of their own. A request
may carry ``MAX_JOB_TOKENS`` tokens in all (``$HEARTH_EMBED_MAX_TOKENS``); its inputs run in
batches of ``$HEARTH_EMBED_BATCH`` (default 16), shared fairly with the other requests. A
request's job outlives one death of its worker (``LiveEncoder``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from runtime.config import DEFAULT_CTX
from runtime.engine.embed_client import EmbedClient
from runtime.engine.embed_messages import MAX_JOB_TOKENS, EmbedSpec
from runtime.engine.protocol import EncoderEngine, ModelLoadFailed, WorkerDied
from runtime.engine.worker_pipe import WorkerProcess
from runtime.store.onnx_model import InvalidOnnxModel, is_onnx_path, read_onnx_model

GENERATE, EMBEDDING, RERANK = "generate", "embedding", "rerank"
#: llama.cpp's LLAMA_POOLING_TYPE_RANK, as written in a reranker GGUF's metadata
_RANK_POOLING = 4
#: how long a job whose worker died waits for the service to see that worker end
WORKER_END_WAIT_S = 5.0


class WrongModelKind(ValueError):
    """The model cannot do what the endpoint asks (a chat model for embeddings, ...)."""

#: llama.cpp architectures that encode text into vectors instead of generating it
ENCODER_ARCHITECTURES = frozenset({"bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3",
                                   "modern-bert", "neo-bert", "t5encoder"})


@lru_cache(maxsize=256)
def _task(path: str, _mtime: int) -> str:
    if is_onnx_path(path):
        try:
            return read_onnx_model(path).kind
        except InvalidOnnxModel:
            return EMBEDDING
    from runtime.server.models.model_header import header

    try:
        h = header(Path(path))
    except (OSError, ValueError):
        return GENERATE
    arch = h.architecture or ""
    if h.metadata.get(f"{arch}.pooling_type") == _RANK_POOLING:
        return RERANK
    return EMBEDDING if arch in ENCODER_ARCHITECTURES else GENERATE


def model_task(path: Path | str) -> str:
    """``generate``, ``embedding`` or ``rerank`` for the model file at ``path``."""
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        return GENERATE
    return _task(str(path), mtime)


def refuse_unless(model_id: str, task: str, wanted: str) -> None:
    """Raise ``WrongModelKind`` naming the reason when a model of ``task`` cannot serve ``wanted``."""
    if task == wanted:
        return
    if wanted == GENERATE:
        what = "a reranking" if task == RERANK else "an embedding"
        raise WrongModelKind(f"model {model_id!r} is {what} model: it cannot generate text; "
                             f"use {'/v1/rerank' if task == RERANK else '/v1/embeddings'}, or name a chat model")
    if wanted == EMBEDDING:
        if task == RERANK:
            raise WrongModelKind(f"model {model_id!r} is a reranker (a cross-encoder): it scores query and "
                                 "document pairs and makes no embeddings; use /v1/rerank, or name an embedding model")
        raise WrongModelKind(f"model {model_id!r} is a text-generation model: Hearth serves embeddings from "
                             "embedding models only (e.g. minilm-l6, or an encoder GGUF such as bge or nomic-embed)")
    if task == EMBEDDING:
        raise WrongModelKind(f"model {model_id!r} is an embedding model, not a reranker: reranking needs a "
                             "cross-encoder (e.g. bge-reranker-base or jina-reranker-v1-tiny: `hearth pull` one)")
    raise WrongModelKind(f"model {model_id!r} is a text-generation model and cannot rerank: reranking needs a "
                         "cross-encoder (e.g. bge-reranker-base or jina-reranker-v1-tiny: `hearth pull` one)")


@dataclass(slots=True)
class _Device:
    name: str
    total: int


@dataclass(slots=True)
class EmbedPlan:
    """What the router counts for an embedding model: the weights and the runtime's buffers, in RAM."""

    ram_bytes: int
    fits: bool = True
    message: str = ""
    ctx: int = 2048
    gpu_layers: int = 0
    devices: list = field(default_factory=list)

    @classmethod
    def for_size(cls, size: int) -> "EmbedPlan":
        need = int(size * 1.5) + (96 << 20)
        return cls(need, devices=[_Device("CPU", need)])

    @classmethod
    def for_file(cls, path: Path | str) -> "EmbedPlan":
        return cls.for_size(os.stat(path).st_size)


def embed_threads(config) -> int:
    """``--embed-threads`` (``EngineConfig.embed_threads``); ``HEARTH_EMBED_THREADS`` overrides it."""
    return max(1, int(os.environ.get("HEARTH_EMBED_THREADS") or config.embed_threads))


#: catalog fields an ONNX model's worker takes over its files' configuration
CATALOG_SETTINGS = ("matryoshka", "pooling", "normalize", "max_length")


def catalog_settings(model_id: str) -> dict:
    from runtime.store.catalog import load_catalog

    entry = load_catalog().get(model_id.split(":", 1)[0])
    return {k: entry.raw[k] for k in CATALOG_SETTINGS if k in entry.raw} if entry is not None else {}


async def start_embed_engine(model, config, ctx: int) -> EmbedClient:
    """Start the embedding worker for ``model`` (a ``ResolvedModel``)."""
    fmt = "onnx" if is_onnx_path(model.path) else "gguf"
    engine = EmbedClient(EmbedSpec(model.id, str(model.path), fmt, threads=embed_threads(config),
                                   batch_size=int(os.environ.get("HEARTH_EMBED_BATCH", "16")),
                                   n_ctx=min(ctx, DEFAULT_CTX), overrides=catalog_settings(model.id) or None,
                                   max_job_tokens=int(os.environ.get("HEARTH_EMBED_MAX_TOKENS") or MAX_JOB_TOKENS)))
    try:
        await asyncio.wait_for(engine.start(), config.load_timeout)
    except asyncio.TimeoutError:
        if engine.alive:
            engine.process.kill()
        await engine.stop(timeout=5.0)
        raise ModelLoadFailed(f"loading {model.id} took longer than {config.load_timeout:g} s") from None
    return engine


class LiveEncoder:
    """The encoder engine one request runs on, which survives one death of its worker.

    A worker killed or crashed between two requests may still look alive when the next one
    arrives (its end reaches the loop after the request does): that job fails with
    ``WorkerDied``. An embedding or a score is a pure function of its inputs, so the job runs
    once more, on the worker ``again`` gets from the router once the dead one is seen gone (the
    router restarts a dead worker). Once only: an input that kills its worker kills one more,
    then the request fails."""

    def __init__(self, engine: EncoderEngine, again: Callable[[], Awaitable[EncoderEngine]]) -> None:
        self.engine = engine
        self._again = again

    @property
    def info(self) -> dict:
        return self.engine.info

    @property
    def model_id(self) -> str:
        return self.engine.model_id

    async def embed(self, texts: list[str] | None = None, token_rows: list[list[int]] | None = None,
                    truncate: bool = True) -> tuple[Any, int]:
        return await self._run(lambda e: e.embed(texts=texts, token_rows=token_rows, truncate=truncate))

    async def score(self, query: str, documents: list[str], truncate: bool = True) -> tuple[Any, int]:
        return await self._run(lambda e: e.score(query, documents, truncate=truncate))

    async def _run(self, job: Callable[[EncoderEngine], Awaitable[tuple[Any, int]]]) -> tuple[Any, int]:
        try:
            return await job(self.engine)
        except WorkerDied:
            if isinstance(self.engine, WorkerProcess) and not await self.engine.ended(WORKER_END_WAIT_S):
                raise
        self.engine = await self._again()
        return await job(self.engine)


def _fit(need: int, hw, task: str | None, ctx: int | None, local: bool) -> dict:
    fits = hw is None or need <= hw.ram.available
    return {"verdict": "cpu" if fits else "too_big", "fits": fits, "ctx": ctx, "gpu_layers": 0, "devices": [],
            "total_bytes": need, "predicted_tokens_per_s": None, "estimated": not local,
            "message": f"an {task or 'embedding'} model on the CPU: about {need / (1 << 20):.0f} MiB of RAM"}


def encoder_fit(entry, hw, data_dir: Path) -> tuple[dict, bool]:
    """The catalog's fit verdict for an embedding or reranking model: it runs on the CPU, and
    needs about its file once and a half (the runtime's buffers) beside the other models."""
    from runtime.store.resolve import UnknownModel, resolve_model

    try:
        path, local = resolve_model(entry.id, data_dir).path, True
        size = path.stat().st_size
    except (UnknownModel, OSError, LookupError, ValueError):
        local = False
        size = entry.estimated_bytes() or int((entry.raw.get("params") or 0)
                                              * (1 if entry.default_quant == "INT8" else 4))
    need = EmbedPlan.for_size(size).ram_bytes
    return _fit(need, hw, entry.raw.get("task"), entry.context_length, local), local


def file_fit(path: Path, hw) -> dict | None:
    """``/hearth/fit`` for a local model file that is an encoder (None: a text-generation model)."""
    task = model_task(path)
    if task == GENERATE:
        return None
    ctx = read_onnx_model(path).max_length if is_onnx_path(path) else None
    return _fit(EmbedPlan.for_file(path).ram_bytes, hw, task, ctx, True)
