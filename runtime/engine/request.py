"""A request inside the engine: tokens, progress, and the sequence it occupies."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from runtime.sampling_params import SamplingParams


class FinishReason(str, enum.Enum):
    STOP = "stop"  # end-of-generation token or a stop string
    LENGTH = "length"  # max_tokens or the context limit
    CANCELLED = "cancelled"
    ERROR = "error"


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Request:
    """``tokens`` is prompt + output; ``num_computed`` of them have KV cells in the context."""

    request_id: str
    prompt_len: int
    tokens: list[int]
    params: SamplingParams
    max_tokens: int
    arrival: int = 0
    status: RequestStatus = RequestStatus.WAITING
    seq_id: int | None = None
    num_computed: int = 0
    num_preemptions: int = 0
    #: prompt tokens that came from the prefix cache at admission
    cached_tokens: int = 0
    #: chained hashes of the full blocks computed so far (registered in the cache or not)
    block_hashes: list[int] = field(default_factory=list)
    sampler: Any = None
    detok: Any = None
    finish_reason: FinishReason | None = None
    extra_stop: list[str] = field(default_factory=list)
    #: for the 2nd..nth completion of one prompt: admitted only once this request's prompt
    #: is computed, so its full blocks come from the prefix cache instead of being recomputed
    follows: "Request | None" = None
    #: speculative decoding state (``runtime.engine.speculator.RequestSpec``), None: not drafting
    spec: Any = None
    #: prompt tokens whose logprobs were sent (``params.prompt_logprobs``)
    prompt_logprobs_sent: int = 0
    #: constrained decoding (``runtime.engine.constraint.Constraint``), None: free text
    constraint: Any = None
    #: ``runtime.engine.reasoning_budget.ReasoningBudget``, None: no budget
    reasoning: Any = None
    #: the prompt's images and clips (``runtime.media.MediaLayout``), None: text only
    media: Any = None
    #: whose request it is (``messages.Owner.client``), and its place among that client's
    #: requests in the engine when it was queued (the scheduler's fair order)
    client: str = ""
    turn: int = 0
    #: the parent hash of its first block: its cache scope's (``block_hash.scope_root``)
    cache_root: int = 0

    @property
    def num_output(self) -> int:
        return len(self.tokens) - self.prompt_len

    def pos_of(self, i: int) -> int:
        """The model's position of token ``i``: ``i``, except after an image that M-RoPE places on
        a grid (``runtime.media.PositionMap``)."""
        return i if self.media is None else self.media.pos_of(i)

    @property
    def wants_prompt_rows(self) -> bool:
        """Whether the next chunks need logits at every prompt position (prompt logprobs)."""
        return self.params.prompt_logprobs and self.prompt_logprobs_sent < self.prompt_len

    @property
    def num_pending(self) -> int:
        """Tokens still to be computed before the next one can be sampled."""
        return len(self.tokens) - self.num_computed
