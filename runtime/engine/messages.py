"""Small dataclasses that cross the pipe between the service and the engine worker.

The worker sends one ``StepResult`` per step carrying the new text of every running
request, never one message per token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.chat.contract import OutputContract
from runtime.config import EngineConfig
from runtime.engine.constraint_spec import ConstraintSpec
from runtime.engine.outputs import EngineStats, RequestOutput
from runtime.media import Media
from runtime.sampling_params import SamplingParams


@dataclass(slots=True)
class WorkerSpec:
    model_id: str
    model_path: str
    #: the service's engine settings, as given (``ctx``: the context this model loads with)
    engine: EngineConfig = field(default_factory=EngineConfig)
    n_gpu_layers: int = 0
    #: several GPUs (the fit plan's): llama.cpp's split mode, share of layers per GPU, main GPU
    split_mode: str = "layer"
    tensor_split: list[float] | None = None
    main_gpu: int = 0
    #: a mixture-of-experts model's first layers whose routed experts stay in RAM (the fit plan's)
    cpu_moe_layers: int = 0
    #: sequence ids kept for prefix-cache holders, beside the ``parallel`` running ones
    cache_seqs: int = 32
    #: speculative decoding: the draft model's file, or "ngram" (prompt lookup), as resolved
    #: from ``engine.draft``; None: off
    draft: str | None = None
    draft_id: str | None = None
    #: prompts longer than this (characters) are tokenized on a helper thread (worker.py)
    inline_tokenize_chars: int = 16 * 1024
    #: the model's multimodal projector (``mmproj`` GGUF): images and/or audio; None: text only
    mmproj_path: str | None = None
    #: the Jinja chat template used instead of the GGUF's (``--chat-template-file``, the model's
    #: stored override); None: the model's own. The output contract is derived from it.
    chat_template: str | None = None


# service -> worker
@dataclass(slots=True, frozen=True)
class Owner:
    """Whose request it is: ``client`` orders the queue fairly between clients (the scheduler);
    ``cache_scope`` names the prefix cache the request reads and fills ("": the one every client
    shares; another: a cache of its own, so that a client cannot learn from ``cached_tokens``
    what another one sent)."""

    client: str = ""
    cache_scope: str = ""


@dataclass(slots=True)
class Submit:
    request_id: str
    params: SamplingParams
    prompt: str | None = None
    messages: list[dict] | None = None
    tokens: list[int] | None = None
    n: int = 1
    #: tokenize only: the worker answers ``Accepted`` with the prompt's length and runs nothing
    count_only: bool = False
    #: constrained decoding (compiled and checked by the service), None: free text
    constraint: ConstraintSpec | None = None
    #: extra variables for the chat template (``tools``, ``enable_thinking``, ...)
    template_vars: dict | None = None
    #: images and clips, in the order of ``runtime.media.MARKER`` in the messages' text
    media: list[Media] | None = None
    #: what a conversation longer than the context sends (``runtime.engine.context_overflow``:
    #: ``truncate_middle`` or ``rolling_window``); None: it is refused
    overflow: str | None = None
    owner: Owner = field(default_factory=Owner)


@dataclass(slots=True)
class Cancel:
    request_id: str


@dataclass(slots=True)
class Shutdown:
    pass


# worker -> service
@dataclass(slots=True)
class Loaded:
    pid: int
    n_ctx: int
    max_request_tokens: int
    info: dict = field(default_factory=dict)
    n_vocab: int | None = None
    chat_template: str | None = None
    #: how the model writes reasoning and tool calls (``runtime.chat.template_analysis``)
    contract: OutputContract = field(default_factory=OutputContract)
    #: what the projector reads: {"vision": bool, "audio": bool}; None: text only
    media: dict | None = None


@dataclass(slots=True)
class LoadFailed:
    message: str
    code: str | None = None  #: a runtime.engine.protocol.ErrorCode value


@dataclass(slots=True)
class Accepted:
    request_id: str
    prompt_tokens: int
    #: messages the overflow policy left out of the conversation
    dropped_messages: int = 0


@dataclass(slots=True)
class Rejected:
    request_id: str
    message: str
    code: str | None = None  #: a runtime.engine.protocol.ErrorCode value
    sizes: tuple[int, int] | None = None  #: prompt and context tokens, when the prompt does not fit


@dataclass(slots=True)
class StepResult:
    outputs: list[RequestOutput]
    stats: EngineStats


@dataclass(slots=True)
class Stats:
    stats: EngineStats


@dataclass(slots=True)
class Fatal:
    message: str
