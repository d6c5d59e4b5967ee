"""The one internal request every wire format's parser builds: messages or a prompt, sampling,
tools, structured output, reasoning options, and how the reply is delivered."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runtime.sampling_params import SamplingParams


@dataclass(slots=True)
class GenerationRequest:
    model: str | None
    params: SamplingParams
    stream: bool = False
    include_usage: bool = False
    messages: list[dict] | None = None
    prompt: str | None = None
    tokens: list[int] | None = None
    echo: bool = False
    n: int = 1
    #: the context the client asked the model to be loaded with (Ollama's ``num_ctx``)
    num_ctx: int | None = None
    keep_alive: float | None = None  # seconds; None: the service default
    #: constrained decoding (``runtime.engine.constraint.ConstraintSpec``), None: free text
    constraint: Any = None
    #: the JSON schema a structured reply follows (None: not JSON)
    schema: dict | None = None
    #: OpenAI function tools ``[{"type": "function", "function": {...}}]`` and tool_choice
    tools: list[dict] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool = True
    #: reasoning: None (the template's default), True / False; effort "low" / "medium" / "high"
    think: bool | None = None
    reasoning_effort: str | None = None
    #: at most this many tokens of reasoning (Anthropic's ``thinking.budget_tokens``); None: the
    #: effort's budget (``generation.EFFORT_BUDGETS``), or none
    reasoning_budget: int | None = None
    #: images and clips (``runtime.media.Media``), in the order of their markers in ``messages``
    media: list[Any] | None = None

