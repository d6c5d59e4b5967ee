"""Tools, structured output and reasoning for the wire formats that translate into the internal
request (Anthropic Messages, OpenAI Responses), and the typed event stream of their replies.

:func:`apply_options` puts the translated fields through the chat API's own validation
(``tool_calls.apply_tools``, ``structured_output.openai_constraint``), so every wire format
offers tools to the model the same way. :func:`events` reads a :class:`~runtime.server.generation.Run`
as ``output_events`` (answer text, reasoning, tool calls); :class:`Reply` collects them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime.engine.client import EngineError
from runtime.server.chat_output import parser_for
from runtime.server.generation import Run, engine_error
from runtime.server.output_events import Event, ReasoningDelta, TextDelta
from runtime.server.schemas import GenerationRequest
from runtime.server.structured_output import openai_constraint
from runtime.server.tool_calls import OutputPlan, apply_tools

#: efforts beyond the internal scale (low / medium / high) are its top
_EFFORT = {"xhigh": "high", "max": "high"}


def apply_options(gen: GenerationRequest, *, tools: list[dict] | None, tool_choice: Any, parallel: bool | None,
                  think: bool | None, effort: str | None, response_format: dict | None,
                  extensions: dict | None = None) -> None:
    """Tools, tool choice, reasoning and response format (all in OpenAI chat's shape) into ``gen``;
    ``gen.messages`` must hold the whole conversation (earlier calls and results included).
    ``extensions``: Hearth's own ``regex`` / ``grammar`` fields, as the chat API takes them."""
    body = {**(extensions or {}), "tools": tools or None, "tool_choice": tool_choice, "parallel_tool_calls": parallel,
            "think": think, "reasoning_effort": _EFFORT.get(effort, effort), "response_format": response_format}
    body = {k: v for k, v in body.items() if v is not None}
    gen.constraint, gen.schema = openai_constraint(body)
    apply_tools(gen, body, gen.messages)


async def events(run: Run, plan: OutputPlan | None):
    """The run's output as events; with no plan (no tools, not a reasoning model) plain text."""
    if plan is None:
        async for text in run.pieces():
            yield TextDelta(text)
        return
    parser = parser_for(plan)
    async for text in run.pieces():
        for e in parser.feed(text):
            yield e
    for e in parser.finish():
        yield e
    run.calls = parser.calls


@dataclass(slots=True)
class Reply:
    """A whole reply: answer text, reasoning, and the calls (``{"id", "name", "arguments"}``)."""

    text: str = ""
    reasoning: str = ""
    calls: list[dict] = field(default_factory=list)

    def add(self, e: Event) -> None:
        if isinstance(e, TextDelta):
            self.text += e.text
        elif isinstance(e, ReasoningDelta):
            self.reasoning += e.text


async def collect(run: Run, plan: OutputPlan | None) -> Reply:
    """The whole reply; an engine error becomes the API error."""
    reply = Reply()
    try:
        async for e in events(run, plan):
            reply.add(e)
    except EngineError as e:
        raise engine_error(e) from None
    reply.calls = list(run.calls)
    return reply
