"""Tools, structured output and reasoning for the wire formats that translate into the internal
request (Anthropic Messages, OpenAI Responses).

:func:`apply_options` puts the translated fields through the chat API's own validation
(``tool_calls.apply_tools``, ``structured_output.openai_constraint``), so every wire format
offers tools to the model the same way.
"""

from __future__ import annotations

from typing import Any

from runtime.server.generate.request import GenerationRequest
from runtime.server.generate.structured_output import openai_constraint
from runtime.server.generate.tool_calls import apply_tools

#: efforts beyond the internal scale (low / medium / high) are its top
_EFFORT = {"xhigh": "high", "max": "high"}


def apply_options(gen: GenerationRequest, *, tools: list[dict] | None, tool_choice: Any, parallel: bool | None,
                  think: bool | None, effort: str | None, response_format: dict | None,
                  extensions: dict | None = None) -> None:
    """Tools, tool choice, reasoning and response format (all in OpenAI chat's shape) into ``gen``;
    ``gen.messages`` must hold the whole conversation (earlier calls and results included).
    ``extensions``: Hearth's own ``regex`` / ``grammar`` fields, as the chat API takes them."""
    body = {**(extensions or {}), "tools": tools or None, "tool_choice": tool_choice, "parallel_tool_calls": parallel,
            "think": think, "reasoning_effort": _EFFORT.get(effort, effort) if effort else effort, "response_format": response_format}
    body = {k: v for k, v in body.items() if v is not None}
    gen.constraint, gen.schema = openai_constraint(body)
    apply_tools(gen, body, gen.messages)
