"""What a compile job costs, measured before any work on it starts.

A job's cost is the JSON of its schemas (each tool's parameters, a response format's schema) and
the text of its pattern or grammar, in bytes: what the helper process reads, checks and compiles,
and what compiling it takes time in proportion to (about 6 s a megabyte of tool schemas on this
project's 2-core VM). It is measured by one walk of the job's values that stops as soon as a cap
of ``schema_limits`` is passed (each schema's ``MAX_SCHEMA_BYTES``, the tools' ``MAX_TOOLS_BYTES``
in all), so measuring an oversized list costs no more than measuring one at the cap, and the
refusal (``ConstraintError``, a 400 naming the field) comes before the job is pickled or queued.

The sizes are exactly those of ``schema_limits.schema_bytes`` (compact JSON, ASCII escapes), which
the helper checks again. The walk is Python code: :func:`job_cost` with ``max_nodes`` gives up
(None) past that many values, so the service measures small jobs on its event loop and the rest
in a thread, where the loop keeps answering between the walk's steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Any

from runtime.engine.constraint_spec import JSON_SCHEMA, ConstraintError
from runtime.server.generate.constraint_jobs import CompileJob, ToolsJob
from runtime.server.generate.schema_limits import MAX_SCHEMA_BYTES, MAX_TOOLS_BYTES, TOO_LARGE

#: what one tool adds beyond its schema (its name, its place in the call grammar)
PER_TOOL_BYTES = 256


@dataclass(frozen=True, slots=True)
class JobCost:
    """A job's measured size: ``bytes`` of schemas and text in all (tools included), ``tools``
    offered."""

    bytes: int
    tools: int = 0


class _TooManyNodes(Exception):
    pass


class _Walk:
    """Walks values as compact JSON, counting the values visited against ``max_nodes``."""

    def __init__(self, max_nodes: int | None) -> None:
        self.left = max_nodes

    def size(self, value: Any, limit: int) -> int | None:
        """``value``'s size as compact JSON (``json.dumps(value, separators=(",", ":"))``), by
        one iterative walk; None as soon as it is over ``limit``. A string is encoded only when
        it could still fit: a 30 MB one costs nothing to refuse."""
        size = 0
        stack = [value]
        while stack:
            v = stack.pop()
            if self.left is not None:
                self.left -= 1
                if self.left < 0:
                    raise _TooManyNodes
            if isinstance(v, str):
                size += _text_size(v, limit - size)
            elif isinstance(v, dict):
                size += 2 + max(0, len(v) - 1) + len(v)  # braces, commas, colons
                for k, item in v.items():
                    size += _text_size(k if isinstance(k, str) else _key_text(k), limit - size)
                    stack.append(item)
            elif isinstance(v, (list, tuple)):
                size += 2 + max(0, len(v) - 1)
                stack.extend(v)
            elif v is None or v is True:
                size += 4
            elif v is False:
                size += 5
            elif isinstance(v, int):
                size += len(int.__repr__(v))
            elif isinstance(v, float):
                size += len(_float_text(v))
            else:
                size += len(repr(v))  # not JSON: the helper refuses it; counted, so it is not free
            if size > limit:
                return None
        return size


def job_cost(job: CompileJob | ToolsJob, max_nodes: int | None = None) -> JobCost | None:
    """The job's cost; ``ConstraintError`` (code ``TOO_LARGE``, naming the field) for a schema
    over ``MAX_SCHEMA_BYTES`` or tools over ``MAX_TOOLS_BYTES`` in all; None when the walk
    passed ``max_nodes`` values before it was done (measure it again without the bound, off the
    event loop)."""
    walk = _Walk(max_nodes)
    try:
        if isinstance(job, CompileJob):
            return JobCost(_one(walk, job))
        total = _one(walk, job.answer) if job.answer is not None else 0
        tools = 0
        for tool, where in zip(job.tools, job.where):
            function = tool.get("function") if isinstance(tool, dict) else None
            params = function.get("parameters") if isinstance(function, dict) else None
            if params is None:
                continue
            room = MAX_TOOLS_BYTES - tools
            size = walk.size(params, min(MAX_SCHEMA_BYTES, room))
            if size is None and room < MAX_SCHEMA_BYTES:
                raise ConstraintError(f"the tools' parameter schemas are over {MAX_TOOLS_BYTES} bytes of JSON in all "
                                      "(the limit)", "tools", TOO_LARGE)
            tools += _fits(size, where)
        return JobCost(total + tools + PER_TOOL_BYTES * len(job.tools), len(job.tools))
    except _TooManyNodes:
        return None


def _one(walk: _Walk, job: CompileJob) -> int:
    if job.kind == JSON_SCHEMA:
        return _fits(walk.size(job.source, MAX_SCHEMA_BYTES), job.param or job.kind)
    # a pattern or a grammar: its length was capped when the body was read, and the helper checks it
    return len(job.source) if isinstance(job.source, str) else 0


def _fits(size: int | None, param: str) -> int:
    if size is None:
        raise ConstraintError(f"'{param}' is over {MAX_SCHEMA_BYTES} bytes of JSON (the limit for one schema)",
                              param, TOO_LARGE)
    return size


def _text_size(text: str, room: int) -> int:
    """A string's size as JSON (quoted, escaped to ASCII); a lower bound, not encoded, when even
    that is over ``room``."""
    return len(text) + 2 if len(text) + 2 > room else len(encode_basestring_ascii(text))


def _float_text(v: float) -> str:
    if v != v:
        return "NaN"
    if v in (float("inf"), float("-inf")):
        return "Infinity" if v > 0 else "-Infinity"
    return float.__repr__(v)


def _key_text(key: object) -> str:
    """A dict key that is not text, as ``json.dumps`` writes it (then quoted)."""
    if key is True or key is False or key is None:
        return {True: "true", False: "false", None: "null"}[key]
    return _float_text(key) if isinstance(key, float) else repr(key)
