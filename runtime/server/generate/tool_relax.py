"""Tool parameter schemas the grammar cannot enforce, relaxed to the closest one it can.

Real agents send tool schemas with keywords the grammar library does not implement
(``if``/``then``/``else``, ``not``, ``propertyNames``, ``uniqueItems``...), regular expressions
in a dialect it does not take (look-around), ``$ref`` loops, or simply more than it can compile.
Refusing the request would stop the agent; instead each such tool is relaxed, one rung at a time,
until its schema compiles: every rung accepts everything the one before accepted (only
constraints are dropped), and the last is ``{"type": "object"}``, any JSON object. The
reply's ``x-hearth-relaxed-tools`` header and the log name the relaxed tools.

Only what the grammar enforces changes: the model still sees the tools as the client sent them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from runtime.engine.constraint_spec import ConstraintError
from runtime.server.generate.schema_limits import _LISTS, _MAPS, _ONE, check_pattern

#: keywords llguidance 1.9 does not implement; dropping one only lets more through
UNSUPPORTED = frozenset({"if", "then", "else", "not", "dependentSchemas", "dependentRequired", "contains",
                         "minContains", "maxContains", "propertyNames", "uniqueItems", "unevaluatedProperties",
                         "unevaluatedItems", "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor"})
#: the second rung also drops regular expressions, formats and intersections (an ``allOf`` can
#: be unsatisfiable); ``additionalProperties`` goes with ``patternProperties``, which it depends on
LOOSE = UNSUPPORTED | {"pattern", "format", "patternProperties", "allOf"}
ANY_OBJECT = {"type": "object"}


def map_schema(node: Any, keep: Callable[[dict, str], bool], ref: Callable[[str], str] | None = None) -> Any:
    """A copy of the schema ``node`` without the keywords ``keep(node, key)`` refuses, at every
    level; ``ref`` rewrites ``$ref`` values. Values that are data (``enum``, ``const``,
    ``default``...) are copied as they are, so a property *named* like a keyword is kept.
    Recursive: a schema's depth is bounded by the JSON depth limit of the body and of JSON text."""
    if not isinstance(node, dict):
        return node
    out: dict = {}
    for key, value in node.items():
        if not keep(node, key):
            continue
        if key in _MAPS and isinstance(value, dict):
            out[key] = {name: map_schema(sub, keep, ref) for name, sub in value.items()}
        elif (key in _LISTS or key == "items") and isinstance(value, list):
            out[key] = [map_schema(sub, keep, ref) for sub in value]
        elif (key in _ONE or key == "items") and isinstance(value, dict):
            out[key] = map_schema(value, keep, ref)
        elif key == "$ref" and ref is not None and isinstance(value, str):
            out[key] = ref(value)
        else:
            out[key] = value
    return out


def rebase(schema: dict, at: str) -> dict:
    """``schema`` moved to the JSON pointer ``at`` of a larger document (``#/$defs/tool0``):
    its local ``$ref`` keywords (``#``, ``#/$defs/x``) point where they pointed before."""
    return map_schema(schema, lambda node, key: True, lambda r: at + r[1:] if r.startswith("#") else r)


def _oversized(pattern: str) -> bool:
    try:
        check_pattern(pattern, "")
    except ConstraintError:
        return True
    return False


def without_oversized_patterns(schema: Any) -> tuple[Any, bool]:
    """The schema without the regular expressions over the caps (``MAX_PATTERN_CHARS``,
    ``MAX_PATTERN_GROUP_DEPTH``), and whether any was dropped: in a tool's schema they are
    relaxed away rather than refused."""
    dropped = False

    def keep(node: dict, key: str) -> bool:
        nonlocal dropped
        bad = (key == "pattern" and isinstance(node[key], str) and _oversized(node[key])) or (
            key in ("patternProperties", "additionalProperties") and isinstance(node.get("patternProperties"), dict)
            and any(_oversized(k) for k in node["patternProperties"]))
        dropped |= bad
        return not bad

    if not isinstance(schema, dict):
        return schema, False
    return map_schema(schema, keep), dropped


def rungs(schema: dict) -> Iterator[dict]:
    """The schemas to try, the client's own first, each accepting at least what the one before
    did; the last is any JSON object."""
    seen = [schema]
    yield schema
    for drop in (UNSUPPORTED, LOOSE):
        def keep(node: dict, key: str, drop=drop) -> bool:
            return key not in drop and not (key == "additionalProperties" and "patternProperties" in node
                                            and "patternProperties" in drop)
        relaxed = map_schema(schema, keep)
        if relaxed not in seen:
            seen.append(relaxed)
            yield relaxed
    if ANY_OBJECT not in seen:
        yield dict(ANY_OBJECT)

