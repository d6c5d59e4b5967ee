"""What the service and an embedding worker send each other over the pipe.

The worker answers ``Loaded``/``LoadFailed`` (from ``runtime.engine.messages``) once, then one
``EmbedDone`` or ``EmbedFailed`` per ``EmbedJob`` (none for a job ended by ``EmbedCancel``);
``Shutdown`` ends it.
"""

from __future__ import annotations

from dataclasses import dataclass

#: tokens one embedding or rerank request may carry in all, after truncation (OpenAI's limit too);
#: ``$HEARTH_EMBED_MAX_TOKENS`` changes it
MAX_JOB_TOKENS = 300_000


@dataclass(slots=True, frozen=True)
class EmbedSpec:
    model_id: str
    model_path: str
    format: str  #: onnx | gguf
    threads: int = 2  #: intra-op threads (ONNX Runtime) or llama.cpp threads
    batch_size: int = 16  #: sequences run together at most (length-sorted: less padding)
    n_ctx: int = 2048  #: GGUF models: the longest input, in tokens
    n_gpu_layers: int = 0
    pooling: str | None = None  #: GGUF models: override the model's pooling
    normalize: bool = True  #: GGUF models: L2-normalise vectors (ONNX models follow their config)
    #: ONNX models: settings from the catalog entry (matryoshka, pooling, normalize, max_length)
    overrides: dict | None = None
    #: tokens one job may carry in all (after truncation); more is refused before any runs
    max_job_tokens: int = MAX_JOB_TOKENS


@dataclass(slots=True)
class EmbedJob:
    request_id: str
    op: str  #: embed | score
    texts: list[str] | None = None
    token_rows: list[list[int]] | None = None
    pairs: list[str] | None = None  #: score: the documents, one per entry of ``texts`` (the query)
    truncate: bool = True


@dataclass(slots=True, frozen=True)
class EmbedCancel:
    """The job's client left: drop its inputs that have not run yet, answer nothing."""

    request_id: str


@dataclass(slots=True)
class EmbedDone:
    request_id: str
    values: bytes  #: float32, row-major: [n, dim] vectors or [n] scores
    shape: tuple[int, ...]
    n_tokens: int
    round_jobs: int = 1  #: jobs whose inputs ran together with this one's (1: alone)


@dataclass(slots=True)
class EmbedFailed:
    request_id: str
    message: str
    code: str  #: a runtime.engine.protocol.ErrorCode value
