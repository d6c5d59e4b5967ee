"""Structured output: the request fields that constrain a reply, compiled into a constraint.

- OpenAI ``response_format``: ``{"type": "text"}`` (free), ``{"type": "json_object"}`` (any JSON
  object), ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``;
- Ollama ``format``: ``"json"`` or a JSON schema;
- Hearth's own fields on both APIs: ``regex`` (a regular expression) and ``grammar`` (GBNF, as
  llama.cpp's server takes it, or Lark).

The schema is checked against the JSON Schema meta-schema (``jsonschema``) and compiled by the
grammar library here, in the service: an invalid or unsupported one is a 400 naming the
problem before any worker sees the request, never a silent fallback to free text.
``strict`` changes nothing: every schema is enforced by the grammar.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from runtime.engine.constraint import (
    GBNF, JSON_OBJECT, JSON_SCHEMA, REGEX, ConstraintError, ConstraintSpec, compile_constraint,
)
from runtime.server.errors import ApiError


def constraint_error(e: ConstraintError) -> ApiError:
    return ApiError(400, str(e), param=e.param, code="invalid_schema" if "schema" in (e.param or "") else e.code)


def check_schema(schema: Any, param: str) -> dict:
    """A JSON schema as a dict, checked against its meta-schema; ``ApiError`` otherwise."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise ApiError(400, f"'{param}' is not valid JSON: {e}", param=param, code="invalid_schema") from None
    if not isinstance(schema, dict):
        raise ApiError(400, f"'{param}' must be a JSON schema (an object)", param=param, code="invalid_schema")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as e:
        where = "/".join(str(p) for p in e.absolute_path)
        raise ApiError(400, f"'{param}' is not a valid JSON schema: {e.message}" + (f" (at {where})" if where else ""),
                       param=param, code="invalid_schema") from None
    return schema


def schema_constraint(schema: Any, param: str) -> tuple[ConstraintSpec, dict]:
    schema = check_schema(schema, param)
    try:
        return compile_constraint(JSON_SCHEMA, schema, param), schema
    except ConstraintError as e:
        raise ApiError(400, str(e), param=param, code="invalid_schema") from None


def extension_fields(body: dict) -> dict:
    """Hearth's ``regex`` / ``grammar`` of a body, for the wire formats that translate into the
    chat API's shape (checked when the constraint is compiled)."""
    return {k: body[k] for k in ("regex", "grammar") if body.get(k) is not None}


def _extensions(body: dict) -> ConstraintSpec | None:
    for name, kind in (("regex", REGEX), ("grammar", GBNF)):
        v = body.get(name)
        if v is None:
            continue
        if not isinstance(v, str) or not v:
            raise ApiError(400, f"'{name}' must be a non-empty string", param=name)
        try:
            return compile_constraint(kind, v, name)
        except ConstraintError as e:
            raise constraint_error(e) from None
    return None


def openai_constraint(body: dict) -> tuple[ConstraintSpec | None, dict | None]:
    """The constraint of an OpenAI body, and the JSON schema replies must validate against."""
    rf = body.get("response_format")
    if rf is None:
        return _extensions(body), None
    if not isinstance(rf, dict) or not isinstance(rf.get("type"), str):
        raise ApiError(400, "'response_format' must be an object with a 'type'", param="response_format")
    kind = rf["type"]
    if kind == "text":
        return _extensions(body), None
    if kind == "json_object":
        return compile_constraint(JSON_OBJECT, None), {"type": "object"}
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


def ollama_constraint(body: dict) -> tuple[ConstraintSpec | None, dict | None]:
    """Ollama's ``format``: "json" (any JSON value that is an object) or a JSON schema."""
    fmt = body.get("format")
    if fmt in (None, ""):
        # Hearth's regex / grammar ride in options too (Ollama's clients pass options through)
        options = body.get("options") if isinstance(body.get("options"), dict) else {}
        return _extensions({k: body.get(k, options.get(k)) for k in ("regex", "grammar")}), None
    if fmt == "json":
        return compile_constraint(JSON_OBJECT, None), {"type": "object"}
    if isinstance(fmt, dict):
        return schema_constraint(fmt, "format")
    raise ApiError(400, "'format' must be \"json\" or a JSON schema object", param="format")
