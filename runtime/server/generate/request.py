"""The one internal request every wire format's parser builds: messages or a prompt, sampling,
tools and tool choice, structured output, reasoning options, and how the reply is delivered.

It is the same whatever the wire: messages carry earlier tool calls as :class:`ToolCall`
(arguments as objects, never JSON text) and tool results as ``tool`` messages; tools are
:class:`ToolSpec`; the choice is a ``runtime.tool_choice.ToolChoice``. Chat templates and the
output parser read OpenAI's shapes, made at that boundary (:meth:`Message.template`,
:meth:`ToolSpec.openai`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.engine.constraint_spec import ConstraintSpec
from runtime.media import Media
from runtime.sampling_params import SamplingParams
from runtime.server.generate.constraint_jobs import CompileJob
from runtime.tool_choice import AUTO, ToolChoice


@dataclass(slots=True)
class ToolSpec:
    """A function the model may call; ``parameters``: its JSON schema (None: none declared)."""

    name: str
    description: str | None = None
    parameters: dict | None = None
    #: the request field that held ``parameters``, as its wire names it (``tools.0.input_schema``):
    #: a schema the grammar compiler refuses is a 400 naming it
    param: str = field(default="", compare=False)

    def openai(self) -> dict:
        """As an OpenAI function tool: the shape chat templates and the output parser read."""
        fn: dict = {"name": self.name}
        if self.description:
            fn["description"] = self.description
        if self.parameters is not None:
            fn["parameters"] = self.parameters
        return {"type": "function", "function": fn}


@dataclass(slots=True)
class ToolCall:
    """A call the model made in an earlier turn."""

    id: str
    name: str
    arguments: dict

    def template(self) -> dict:
        """OpenAI's shape with the arguments as an object, as chat templates render calls."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(slots=True)
class Message:
    """One turn: ``role`` is system, developer, user, assistant or tool. ``content`` is text
    (media as ``runtime.media.MARKER``); an assistant's ``tool_calls`` and ``reasoning`` (what it
    thought before them); a tool result's ``tool_call_id``; ``name``: a tool result's function,
    or the author a client named."""

    role: str
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: str | None = None

    def template(self) -> dict:
        """The message as chat templates read it (OpenAI chat's shape, arguments as objects)."""
        out: dict = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.template() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        if self.reasoning is not None:
            out["reasoning_content"] = self.reasoning
        return out


def template_messages(messages: list[Message] | None) -> list[dict] | None:
    """``messages`` as the engine's chat template takes them (None: a raw prompt)."""
    return None if messages is None else [m.template() for m in messages]


@dataclass(slots=True)
class GenerationRequest:
    model: str | None
    params: SamplingParams
    stream: bool = False
    include_usage: bool = False
    messages: list[Message] | None = None
    prompt: str | None = None
    tokens: list[int] | None = None
    echo: bool = False
    n: int = 1
    #: the context the client asked the model to be loaded with (Ollama's ``num_ctx``)
    num_ctx: int | None = None
    keep_alive: float | None = None  # seconds; None: the service default
    #: constrained decoding: a job to compile as the request is planned (a response format, a
    #: regex, a grammar), the compiled constraint once it is; None: free text
    constraint: CompileJob | ConstraintSpec | None = None
    tools: list[ToolSpec] = field(default_factory=list)
    tool_choice: ToolChoice = AUTO
    parallel_tool_calls: bool = True
    #: reasoning: None (the template's default), True / False; effort "low" / "medium" / "high"
    think: bool | None = None
    reasoning_effort: str | None = None
    #: at most this many tokens of reasoning (Anthropic's ``thinking.budget_tokens``); None: the
    #: effort's budget (``generation.EFFORT_BUDGETS``), or none
    reasoning_budget: int | None = None
    #: images and clips, in the order of their markers in ``messages``
    media: list[Media] | None = None
    #: what a conversation longer than the context sends (Hearth's ``context_overflow``:
    #: ``runtime.engine.context_overflow``); None: it is refused
    overflow: str | None = None
