"""What crosses the pipe to the constraint compiler's helper process, and back.

A request's constraint is read into a :class:`CompileJob` (a response format, Hearth's
``regex`` / ``grammar``) when its body is parsed; once the model, and so its tool-call format, is
known, a request with tools becomes a :class:`ToolsJob`. Both are compiled by the helper into a
:class:`CompileResult`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime.chat.contract import CallSyntax
from runtime.engine.constraint_spec import JSON_OBJECT, JSON_SCHEMA, ConstraintError, ConstraintSpec


@dataclass(slots=True)
class CompileJob:
    """One constraint to compile: ``source`` is a JSON schema (a dict) for ``json_schema``,
    None for ``json_object``, the pattern or grammar text otherwise; ``param`` names the
    request field it came from."""

    kind: str
    source: Any
    param: str | None = None

    @property
    def answer_schema(self) -> dict | None:
        """The JSON schema a reply must match, for the JSON kinds (None for the others)."""
        if self.kind == JSON_OBJECT:
            return {"type": "object"}
        return self.source if self.kind == JSON_SCHEMA else None


@dataclass(slots=True)
class ToolsJob:
    """Calls to ``tools`` (OpenAI function tools, as offered) in the model's call ``syntax``
    (from its output contract). ``lazy``: the grammar applies from the syntax's trigger
    (tool_choice auto). ``answer``: a response format's job; a reply is then either calls or an
    answer that matches it."""

    syntax: CallSyntax
    tools: list[dict]
    #: each tool's ``parameters`` field as the request named it (``tools[3].function.parameters``)
    where: list[str]
    parallel: bool
    lazy: bool
    answer: CompileJob | None = None


@dataclass(slots=True)
class CompileResult:
    """The compiled constraint, or the error for the client; ``relaxed``: the tools whose
    schemas were relaxed to compile (``tool_relax``)."""

    spec: ConstraintSpec | None = None
    error: ConstraintError | None = None
    relaxed: list[str] = field(default_factory=list)
    #: the grammar library's full messages, for the service's log (a client sees them shortened)
    notes: list[str] = field(default_factory=list)


@dataclass(slots=True)
class HelperReady:
    """The helper's first message: it has loaded the grammar library."""

    pid: int
