"""Structured output: the request fields that constrain a reply, read into a compile job.

- OpenAI ``response_format``: ``{"type": "text"}`` (free), ``{"type": "json_object"}`` (any JSON
  object), ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``;
- Ollama ``format``: ``"json"`` or a JSON schema;
- Hearth's own fields on both APIs: ``regex`` (a regular expression) and ``grammar`` (GBNF, as
  llama.cpp's server takes it, or Lark).

Reading a body only checks shapes and sizes (cheap, on the event loop); the returned
:class:`~runtime.server.generate.constraint_jobs.CompileJob` is compiled once the model is known
(``tool_calls.plan_output``) by the constraint compiler: its size is measured against the caps
first (``constraint_cost``, before anything is pickled), then, in a helper process, the schema
is checked against the JSON Schema meta-schema and the caps of ``schema_limits``, and compiled
by the grammar library. An invalid, unsupported or oversized one is a 400 naming the field
before any worker sees the request, never a silent fallback to free text. ``strict`` changes nothing:
every schema is enforced by the grammar.
"""

from __future__ import annotations

from typing import Any

from runtime.engine.constraint_spec import GBNF, JSON_OBJECT, JSON_SCHEMA, LARK, REGEX, ConstraintError
from runtime.server.generate.constraint_compiler import (
    CRASHED, TIMEOUT, ClientBusy, CompilerBusy, CompilerUnavailable, compiler,
)
from runtime.server.generate.constraint_jobs import CompileJob, CompileResult, ToolsJob
from runtime.server.errors import ApiError
from runtime.server.generate.schema_limits import MAX_GRAMMAR_BYTES, MAX_PATTERN_CHARS, MAX_SCHEMA_BYTES, TOO_LARGE
from runtime.server.validation import json_text

_CODES = {TOO_LARGE: TOO_LARGE, TIMEOUT: TIMEOUT, CRASHED: CRASHED}


def constraint_error(e: ConstraintError) -> ApiError:
    code = _CODES.get(e.code) or ("invalid_schema" if "schema" in (e.param or "") or "parameters" in (e.param or "")
                                  else e.code)
    return ApiError(400, str(e), param=e.param, code=code)


async def compile_job(job: CompileJob | ToolsJob, client: str = "") -> CompileResult:
    """The job compiled in a helper process, counted against ``client`` (``security.client_id``);
    its error (a 400 naming the field and limit, a schema or tool list over the caps before any
    work), a 429 when the client already holds its share of the compiler, or a 503 when too many
    wait, raised as ``ApiError``."""
    try:
        result = await compiler().compile(job, client)
    except ClientBusy as e:
        raise ApiError(429, str(e), type="rate_limit_error", code="too_many_constraints",
                       headers={"Retry-After": "2"}) from None
    except CompilerBusy as e:
        raise ApiError(503, str(e), type="server_error", code="compiler_busy", headers={"Retry-After": "2"}) from None
    except CompilerUnavailable as e:
        raise ApiError(503, str(e), type="server_error", code="compiler_unavailable") from None
    if result.error is not None:
        raise constraint_error(result.error)
    return result


def check_schema(schema: Any, param: str) -> dict:
    """A JSON schema as a dict (JSON text of at most ``MAX_SCHEMA_BYTES`` is parsed with the
    body's depth and number limits); ``ApiError`` otherwise. Its size, caps and meta-schema are
    checked when it is compiled, in the helper process (measuring a big schema here would hold
    the event loop)."""
    if isinstance(schema, str):
        if len(schema) > MAX_SCHEMA_BYTES:
            raise ApiError(400, f"'{param}' is {len(schema)} characters; a schema is limited to {MAX_SCHEMA_BYTES}",
                           param=param, code=TOO_LARGE)
        try:
            schema = json_text(schema)
        except ValueError as e:
            raise ApiError(400, f"'{param}' is not valid JSON: {e}", param=param, code="invalid_schema") from None
    if not isinstance(schema, dict):
        raise ApiError(400, f"'{param}' must be a JSON schema (an object)", param=param, code="invalid_schema")
    return schema


def schema_constraint(schema: Any, param: str) -> tuple[CompileJob, dict]:
    schema = check_schema(schema, param)
    return CompileJob(JSON_SCHEMA, schema, param), schema


def extension_constraint(body: dict) -> CompileJob | None:
    """Hearth's own ``regex`` / ``grammar`` fields of a body, which every wire format takes."""
    for name, limit in (("regex", MAX_PATTERN_CHARS), ("grammar", MAX_GRAMMAR_BYTES)):
        v = body.get(name)
        if v is None:
            continue
        if not isinstance(v, str) or not v:
            raise ApiError(400, f"'{name}' must be a non-empty string", param=name)
        if len(v) > limit:
            raise ApiError(400, f"'{name}' is {len(v)} characters; the limit is {limit}", param=name, code=TOO_LARGE)
        if name == "regex":
            return CompileJob(REGEX, v, name)
        return CompileJob(GBNF if "::=" in v else LARK, v, name)
    return None


def openai_constraint(body: dict) -> tuple[CompileJob | None, dict | None]:
    """The constraint of an OpenAI body (to compile), and the JSON schema replies must match."""
    rf = body.get("response_format")
    if rf is None:
        return extension_constraint(body), None
    if not isinstance(rf, dict) or not isinstance(rf.get("type"), str):
        raise ApiError(400, "'response_format' must be an object with a 'type'", param="response_format")
    kind = rf["type"]
    if kind == "text":
        return extension_constraint(body), None
    if kind == "json_object":
        return CompileJob(JSON_OBJECT, None, "response_format"), {"type": "object"}
    if kind == "json_schema":
        js = rf.get("json_schema")
        if not isinstance(js, dict):
            raise ApiError(400, "'response_format.json_schema' must be an object with a 'schema'",
                           param="response_format.json_schema")
        name = js.get("name")
        if name is not None and not isinstance(name, str):
            raise ApiError(400, "'response_format.json_schema.name' must be a string",
                           param="response_format.json_schema.name")
        if "strict" in js and js["strict"] is not None and not isinstance(js["strict"], bool):
            raise ApiError(400, "'response_format.json_schema.strict' must be true or false",
                           param="response_format.json_schema.strict")
        if "schema" not in js:
            raise ApiError(400, "'response_format.json_schema.schema' is required",
                           param="response_format.json_schema.schema", code="invalid_schema")
        return schema_constraint(js["schema"], "response_format.json_schema.schema")
    raise ApiError(400, f"'response_format.type' must be text, json_object or json_schema, got {kind!r}",
                   param="response_format.type")


def ollama_constraint(body: dict) -> tuple[CompileJob | None, dict | None]:
    """Ollama's ``format``: "json" (any JSON value that is an object) or a JSON schema."""
    fmt = body.get("format")
    if fmt in (None, ""):
        # Hearth's regex / grammar ride in options too (Ollama's clients pass options through)
        given = body.get("options")
        options: dict = given if isinstance(given, dict) else {}
        return extension_constraint({k: body.get(k, options.get(k)) for k in ("regex", "grammar")}), None
    if fmt == "json":
        return CompileJob(JSON_OBJECT, None, "format"), {"type": "object"}
    if isinstance(fmt, dict):
        return schema_constraint(fmt, "format")
    raise ApiError(400, "'format' must be \"json\" or a JSON schema object", param="format")
