"""JSON schemas for the structured-output tests: nested objects, arrays, enums, anyOf, numbers
with bounds, required and optional properties, additionalProperties false, $ref / $defs.

Strings carry a maxLength, numbers bounds and arrays a maxItems so a small model's reply fits the tests'
max_tokens (the grammar enforces both)."""

from __future__ import annotations

S = {"type": "string", "maxLength": 20}
#: numbers bounded too: an unbounded integer lets a greedy small model write digits forever
I = {"type": "integer", "minimum": -10_000, "maximum": 10_000}
N = {"type": "number", "minimum": -10_000, "maximum": 10_000}


def obj(props: dict, required: list[str] | None = None, closed: bool = True) -> dict:
    out = {"type": "object", "properties": props, "required": list(props) if required is None else required}
    if closed:
        out["additionalProperties"] = False
    return out


SCHEMAS: list[dict] = [
    obj({"name": S}),
    obj({"name": S, "age": I}),
    obj({"age": {"type": "integer", "minimum": 18, "maximum": 99}}),
    obj({"score": {"type": "number", "minimum": 0, "maximum": 1}}),
    obj({"temp": {"type": "number", "exclusiveMinimum": -50, "exclusiveMaximum": 60}}),
    obj({"ok": {"type": "boolean"}}),
    obj({"nothing": {"type": "null"}}),
    obj({"color": {"enum": ["red", "green", "blue"]}}),
    obj({"level": {"type": "integer", "enum": [1, 2, 3]}}),
    obj({"status": {"const": "done"}}),
    obj({"tags": {"type": "array", "items": S, "maxItems": 3}}),
    obj({"nums": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
                  "minItems": 2, "maxItems": 4}}),
    obj({"point": obj({"x": N, "y": N})}),
    obj({"user": obj({"name": S, "address": obj({"city": S, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}})})}),
    obj({"items": {"type": "array", "maxItems": 2, "items": obj({"id": I, "label": S})}}),
    obj({"value": {"anyOf": [I, S]}}),
    obj({"value": {"anyOf": [{"type": "null"}, obj({"a": I})]}}),
    obj({"value": {"oneOf": [{"type": "boolean"}, {"type": "integer", "minimum": 100}]}}),
    obj({"name": S, "nickname": S}, required=["name"]),
    obj({"a": I, "b": I, "c": I}, required=["b"]),
    # open to more properties, of a bounded kind (unbounded extras let a small model ramble on)
    {**obj({"name": S}, closed=False), "additionalProperties": I, "maxProperties": 3},
    obj({"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"}}),
    obj({"word": {"type": "string", "minLength": 3, "maxLength": 8}}),
    obj({"email": {"type": "string", "format": "email", "maxLength": 40}}),
    obj({"day": {"type": "string", "format": "date"}}),
    obj({"matrix": {"type": "array", "maxItems": 2, "items": {"type": "array", "maxItems": 2,
                                                               "items": I}}}),
    obj({"pair": {"type": "array", "prefixItems": [S, I], "items": False}}),
    {"type": "array", "items": I, "minItems": 1, "maxItems": 3},
    {"type": "string", "enum": ["yes", "no"]},
    {"type": "integer", "minimum": 1, "maximum": 10},
    {"$defs": {"person": obj({"name": S, "age": {"type": "integer", "minimum": 0}})},
     **obj({"author": {"$ref": "#/$defs/person"}, "editor": {"$ref": "#/$defs/person"}})},
    obj({"kind": {"enum": ["circle", "square"]}, "size": {"type": "number", "minimum": 0, "maximum": 10},
         "filled": {"type": "boolean"}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}}),
    obj({"meta": {"type": "object", "maxProperties": 2, "additionalProperties": I}}),
    obj({"title": S, "year": {"type": "integer", "minimum": 1900, "maximum": 2030},
         "genres": {"type": "array", "items": {"enum": ["drama", "comedy", "horror"]}, "minItems": 1, "maxItems": 2},
         "rating": {"anyOf": [{"type": "number", "minimum": 0, "maximum": 10}, {"type": "null"}]}}),
]

#: schemas that are not valid JSON schemas, or use what the grammar cannot enforce
INVALID: list[tuple[object, str]] = [
    ({"type": "foo"}, "schema"),
    ({"type": "object", "properties": {"a": {"type": "string", "pattern": "(("}}}, "regex"),
    ({"type": "object", "properties": {"a": {"$ref": "#/nope"}}}, "nope"),
    ({"not": {"type": "string"}}, "not"),
    ({"type": "integer", "minimum": "zero"}, "minimum"),
    ("not json {", "JSON"),
    ([1, 2], "object"),
]
