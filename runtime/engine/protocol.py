"""What the service needs from "a thing that serves a model": the engine interface.

The service (router, API handlers) speaks to engines only through these types, so that a
local llama.cpp worker (``runtime.engine.client.EngineClient``, the first implementation),
an embedder (``EncoderEngine``: ``runtime.engine.embed_client.EmbedClient``) or a remote engine
can stand behind the same model name. This
module imports nothing from the engine implementation: it is the contract, not a part.

Failures cross the process (or network) boundary as an ``EngineError`` subclass that carries
an ``ErrorCode``; callers decide by the code, never by searching the message.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from runtime.chat.contract import OutputContract
from runtime.tool_choice import ToolChoice


class ErrorCode(str, enum.Enum):
    """Why an engine refused or ended a request (the value is the API's ``code``)."""

    CONTEXT_LENGTH_EXCEEDED = "context_length_exceeded"
    INVALID_REQUEST = "invalid_request"  #: an empty prompt, parameters out of range, ...
    INVALID_TOKEN = "invalid_token"  #: a token id outside the model's vocabulary
    REQUEST_FAILED = "request_failed"  #: this one request failed mid-way; the others went on
    CONSTRAINT_FAILED = "constraint_failed"  #: the output constraint could not continue
    CHAT_TEMPLATE = "chat_template_error"
    INVALID_MEDIA = "invalid_media"  #: an image or clip that cannot be read (damaged, too large, ...)
    MEDIA_NOT_SUPPORTED = "media_not_supported"  #: a text-only model was sent an image or clip
    SPECULATION_REFUSED = "speculation_refused"
    WORKER_DIED = "engine_stopped"
    LOAD_FAILED = "model_load_failed"
    DRAFT_REFUSED = "draft_refused"
    SHUTTING_DOWN = "shutting_down"
    #: a remote engine's upstream server: unreachable, too slow, refusing, or broken mid-way
    UPSTREAM_UNAVAILABLE = "upstream_unavailable"
    UPSTREAM_TIMEOUT = "upstream_timeout"
    UPSTREAM_RATE_LIMITED = "upstream_rate_limited"
    UPSTREAM_REFUSED = "upstream_refused"
    UPSTREAM_ERROR = "upstream_error"


class EngineError(Exception):
    """Base of the errors a request can get from an engine; ``code`` says which failure."""

    default_code: ErrorCode | None = None

    def __init__(self, message: str = "", code: ErrorCode | str | None = None) -> None:
        super().__init__(message)
        self.code = ErrorCode(code) if code else self.default_code


class WorkerDied(EngineError):
    default_code = ErrorCode.WORKER_DIED


class ModelLoadFailed(EngineError):
    default_code = ErrorCode.LOAD_FAILED


class RequestRefused(EngineError):
    """The engine refused the request (too long, bad tokens): the client's fault. ``sizes``:
    for a prompt longer than the context, its tokens (or a lower bound) and the context's."""

    default_code = ErrorCode.INVALID_REQUEST

    def __init__(self, message: str = "", code: ErrorCode | str | None = None,
                 sizes: tuple[int, int] | None = None) -> None:
        super().__init__(message, code)
        self.sizes = sizes


class RequestFailed(EngineError):
    """The engine could not finish this one request (the others went on)."""

    default_code = ErrorCode.REQUEST_FAILED


class ServiceStopping(EngineError):
    """The service is shutting down: the request was ended before it finished."""

    default_code = ErrorCode.SHUTTING_DOWN


class UpstreamFailed(EngineError):
    """A remote engine's upstream could not serve the request. ``status`` is the HTTP status
    the client gets (502 unreachable or broken, 504 too slow, 429 or 503 busy), and
    ``retry_after`` the seconds the upstream asked to wait, when it said."""

    default_code = ErrorCode.UPSTREAM_ERROR

    def __init__(self, message: str = "", code: ErrorCode | str | None = None, status: int = 502,
                 retry_after: int | None = None) -> None:
        super().__init__(message, code)
        self.status, self.retry_after = status, retry_after


class LoadedInfo(Protocol):
    """What a started engine reports about the model it serves."""

    pid: int
    n_ctx: int  #: KV capacity in tokens, across the requests decoded together
    max_request_tokens: int  #: the longest prompt + reply one request may have
    #: the vocabulary's size (token ids a request may send: 0..n_vocab-1); None: not known (a remote engine)
    n_vocab: int | None
    #: the chat template (None: the model has none)
    chat_template: str | None
    #: how the model writes reasoning and tool calls, derived from its template when it loaded
    contract: OutputContract
    info: dict  #: the rest of what the engine says about its model, for display (architecture, sizes, ...)


@dataclass(frozen=True, slots=True)
class PromptCount:
    """A prompt's length in the model's tokens, and the messages a context-overflow policy left
    out to make it fit (``runtime.engine.context_overflow``)."""

    tokens: int
    dropped_messages: int = 0


class OutputStream(Protocol):
    """One submitted request: ``prompt_tokens``, then its outputs by ``async for``."""

    request_id: str
    prompt_tokens: int
    #: messages the context-overflow policy left out (0: the whole conversation was sent)
    dropped_messages: int
    finished: bool

    def __aiter__(self) -> AsyncIterator[Any]: ...

    def ready(self) -> list[Any]:
        """Outputs already queued, without waiting."""
        ...

    def cancel(self) -> None: ...


@runtime_checkable
class Engine(Protocol):
    """A started engine serving one model. ``submit`` takes the sampling settings and one of
    prompt text, chat messages or token ids; ``stats`` is the last snapshot the engine sent
    (None before the first); ``active`` counts requests in flight."""

    model_id: str
    stats: Any
    error: str | None

    @property
    def loaded(self) -> LoadedInfo | None:
        """What the engine said when it started (None before)."""
        ...

    @property
    def alive(self) -> bool: ...

    @property
    def active(self) -> int: ...

    @property
    def pid(self) -> int | None:
        """The process holding the model's memory, when it is local (None otherwise)."""
        ...

    async def start(self) -> LoadedInfo: ...

    async def submit(self, params: Any, *, prompt: str | None = None, messages: list[dict] | None = None,
                     tokens: list[int] | None = None, n: int = 1, constraint: Any = None,
                     template_vars: dict | None = None, media: list | None = None,
                     tool_choice: ToolChoice | None = None, overflow: str | None = None,
                     owner: Any = None) -> Sequence[OutputStream]:
        """``constraint``: an output constraint (``ConstraintSpec``); ``template_vars``: extra
        chat-template variables (``tools``, ``enable_thinking``); ``media``: images and clips
        (``runtime.media.Media``) in the order of their markers in the messages; ``tool_choice``:
        which of the tools must be called (an engine that runs the constraint needs no more; a
        remote one forwards it); ``overflow``: the context-overflow policy of a conversation
        (an engine that cannot apply one refuses a conversation longer than its context);
        ``owner``: whose request it is (``messages.Owner``: the queue's fair order and the prefix
        cache's scope; an engine that has neither ignores it)."""
        ...

    async def count_tokens(self, *, prompt: str | None = None, messages: list[dict] | None = None,
                           media: list | None = None, overflow: str | None = None,
                           max_tokens: int | None = None) -> PromptCount:
        """The prompt's length in this model's tokens (chat template and media included), after
        ``overflow``'s policy where the conversation is longer than the context (leaving room for
        a reply of ``max_tokens``); nothing runs."""
        ...

    def cancel(self, request_id: str) -> None: ...

    def fail_all(self, error: EngineError) -> None:
        """End every request in flight with ``error``."""
        ...

    async def close(self) -> None:
        """Stop serving; the engine's memory goes back."""
        ...


@runtime_checkable
class EncoderEngine(Engine, Protocol):
    """An engine serving an encoder (an embedding model, or a cross-encoder that reranks).
    ``info`` is what it reports about the model: ``kind`` (embedding | rerank), ``dimensions``,
    ``max_length``, ``matryoshka`` (dimensions its vectors may be cut to), ``n_vocab``.
    Refusals (too long with ``truncate`` false, a token outside the vocabulary) raise
    ``RequestRefused`` with a code; ``submit`` refuses, as an encoder generates no text."""

    info: dict

    async def embed(self, texts: list[str] | None = None, token_rows: list[list[int]] | None = None,
                    truncate: bool = True) -> tuple[Any, int]:
        """([n, dim] float32 vectors, tokens used) for the texts or the token-id rows."""
        ...

    async def score(self, query: str, documents: list[str], truncate: bool = True) -> tuple[Any, int]:
        """(the relevance logit of each document for the query, tokens used)."""
        ...
