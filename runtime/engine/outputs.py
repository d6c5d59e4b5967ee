"""What the engine gives back: a request's output of one step, the engine's counters, and the
refusal of a request that can never run, each with an ``ErrorCode``. They cross the pipe to the
service, so they live apart from the step loop that makes them."""

from __future__ import annotations

from dataclasses import dataclass

from runtime.engine.kv_stats import KVStats
from runtime.engine.logprobs import TokenLogprob
from runtime.engine.protocol import ErrorCode


class RequestRejected(ValueError):
    """A request that can never run (empty prompt, longer than the context, ...); ``code``:
    a ``runtime.engine.protocol.ErrorCode`` value, sent on to the client with the message."""

    def __init__(self, message: str, code: str | None = None, sizes: tuple[int, int] | None = None) -> None:
        super().__init__(message)
        self.code = code
        #: a prompt longer than the context: (its tokens, or a lower bound; the context's tokens)
        self.sizes = sizes


#: the codes of ``RequestRejected`` and of a failed request's output
CONTEXT_LENGTH_EXCEEDED = ErrorCode.CONTEXT_LENGTH_EXCEEDED
INVALID_REQUEST = ErrorCode.INVALID_REQUEST
INVALID_TOKEN = ErrorCode.INVALID_TOKEN
REQUEST_FAILED = ErrorCode.REQUEST_FAILED


@dataclass(slots=True)
class RequestOutput:
    """What one step produced for one request."""

    request_id: str
    text: str
    n_tokens: int
    finish_reason: str | None = None
    #: prompt tokens served from the prefix cache (set on the final output)
    cached_tokens: int = 0
    #: speculative decoding: drafted and accepted tokens of the request (on the final output)
    drafted: int = 0
    accepted: int = 0
    #: set when ``finish_reason`` is "error": what went wrong with this request (the others go on)
    error: str | None = None
    error_code: str | None = None
    #: the stop string that ended the request, when one did (on the final output)
    stop_sequence: str | None = None
    #: ``params.logprobs``: one entry per token of this output, in order
    logprobs: list[TokenLogprob] | None = None
    #: ``params.prompt_logprobs``: entries of the prompt tokens computed this step, in order
    prompt_logprobs: list[TokenLogprob] | None = None
    #: an engine that knows the reply's structure (a remote one: the upstream parsed it) gives its
    #: reasoning apart from ``text``, and its tool calls, (name, arguments), on the final output;
    #: a local engine gives raw text, which the service's output parser reads
    reasoning: str = ""
    tool_calls: list[tuple[str, dict]] | None = None


@dataclass(slots=True)
class EngineStats:
    running: int
    waiting: int
    tokens_generated: int
    kv_cells_used: int
    kv_capacity: int
    preemptions: int
    requests_finished: int
    kv: KVStats | None = None
    #: speculative decoding counters (``Speculator.as_dict``), None when it is off
    spec: dict | None = None
