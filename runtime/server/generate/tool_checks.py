"""The checks every wire format makes of the tools a request offers, the choice among them and
the calls of earlier turns, each 400 naming the field as that wire names it.

A tool's name is 1-64 letters, digits, '_', '.' or '-' and defined once; a request offers at
most ``MAX_TOOLS``; a tool's parameters are a JSON schema (``structured_output.check_schema``; it
is compiled when the request is planned); a choice names an offered tool; a call's arguments
are a JSON object (or JSON text of one).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from runtime.server.errors import ApiError
from runtime.server.generate.request import ToolSpec
from runtime.server.generate.schema_limits import MAX_TOOLS, TOO_LARGE
from runtime.server.generate.structured_output import check_schema
from runtime.server.validation import json_text
from runtime.tool_choice import AUTO, ToolChoice

_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


@dataclass(frozen=True, slots=True)
class Wording:
    """How a wire format words a 400: OpenAI's ``'tools[0].name' must be ...`` (quoted) or
    Anthropic's ``tools.0.name: must be ...``."""

    quoted: bool = True

    def error(self, param: str, problem: str, code: str | None = None) -> ApiError:
        return ApiError(400, f"'{param}' {problem}" if self.quoted else f"{param}: {problem}", param=param, code=code)


OPENAI = Wording(quoted=True)
ANTHROPIC = Wording(quoted=False)


class ToolList:
    """The tools of one request, checked as each is added. ``count``: how many the body lists
    (refused at once when over the limit, before any is read)."""

    def __init__(self, wording: Wording, count: int, param: str = "tools") -> None:
        self.wording, self.param = wording, param
        self.tools: list[ToolSpec] = []
        self._check_count(count)

    def _check_count(self, count: int) -> None:
        if count > MAX_TOOLS:
            raise self.wording.error(self.param, f"has {count} tools; the limit is {MAX_TOOLS}", TOO_LARGE)

    def add(self, name: Any, description: Any, parameters: Any, at: str,
            keys: tuple[str, str, str] = ("name", "description", "parameters")) -> ToolSpec:
        """A tool at ``at`` (``tools[0].function``) whose fields the wire calls ``keys``."""
        name_at, description_at, parameters_at = (f"{at}.{k}" for k in keys)
        if not isinstance(name, str) or not _NAME.match(name):
            raise self.wording.error(name_at, "must be 1-64 letters, digits, '_', '.' or '-'")
        if any(t.name == name for t in self.tools):
            raise self.wording.error(name_at, f"repeats the name {name!r}: each tool is defined once")
        if description is not None and not isinstance(description, str):
            raise self.wording.error(description_at, "must be a string")
        schema = None if parameters is None else check_schema(parameters, parameters_at)
        self._check_count(len(self.tools) + 1)
        spec = ToolSpec(name, description or None, schema, parameters_at)
        self.tools.append(spec)
        return spec


def checked_choice(wording: Wording, choice: ToolChoice | None, tools: list[ToolSpec], param: str) -> ToolChoice:
    """``choice`` (None: not given: ``auto``) against the offered ``tools``: a forced call needs
    tools, and a named one must be among them."""
    if choice is None:
        return AUTO
    if choice.kind == "function" and not any(t.name == choice.name for t in tools):
        raise wording.error(param, f"names the function {choice.name!r}, which is not in 'tools'")
    if choice.kind == "required" and not tools:
        raise wording.error(param, "asks for a tool call, but no 'tools' were given")
    return choice


def call_arguments(wording: Wording, arguments: Any, param: str) -> dict:
    """An earlier call's ``arguments``: an object, or JSON text of one (blank: no arguments)."""
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        try:
            arguments = json_text(arguments)
        except ValueError as e:
            raise wording.error(param, f"is not valid JSON: {e}") from None
    if not isinstance(arguments, dict):
        raise wording.error(param, "must be a JSON object")
    return arguments
