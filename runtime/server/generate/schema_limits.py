"""Size and depth caps on constraints, checked before any native code sees them.

A JSON schema, a regular expression or a grammar is input an attacker chooses, and the grammar
library (llguidance) is native code with a stack: a chain of about 5,000 ``$ref`` hops or Lark
rules, or 1,000 objects nested through ``$ref``, overflows it and kills the process. These caps
turn what is too big into a 400 that names the field and the limit; what passes them is compiled
in the constraint compiler's helper process under a time budget, so a case the caps miss costs
that process only. Every check here is one linear pass without recursion (a schema sent as text
may be nested as deeply as the body allows).

The caps are far above what real schemas need: OpenAI allows 10 levels of nesting in a
structured-output schema; the agents' tool schemas (Claude Code, Codex, opencode) nest 5 at most
and have no ``$defs``; the grammars people write for llama.cpp have tens of rules.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from runtime.engine.constraint_spec import GBNF, ConstraintError

#: a schema's JSON text, in bytes (each schema: a response format, one tool's parameters)
MAX_SCHEMA_BYTES = 256 * 1024
#: subschemas nested in each other, counting each ``$ref`` hop as a level
MAX_SCHEMA_DEPTH = 64
#: entries of ``$defs`` / ``definitions`` in one schema
MAX_SCHEMA_DEFS = 512
#: ``$ref`` keywords in one schema (each one is expanded into the grammar)
MAX_SCHEMA_REFS = 2048
#: a regular expression (``regex``, a schema's ``pattern`` or ``patternProperties`` key), in characters
MAX_PATTERN_CHARS = 1000
#: groups nested in a regular expression
MAX_PATTERN_GROUP_DEPTH = 32
#: a Lark or GBNF grammar, in bytes
MAX_GRAMMAR_BYTES = 128 * 1024
#: rules in a Lark or GBNF grammar (GBNF's conversion is worse than quadratic in them)
MAX_GRAMMAR_RULES = 512
#: brackets nested in a grammar
MAX_GRAMMAR_NESTING = 64
#: tools in one request, and their parameter schemas' JSON in all, in bytes
MAX_TOOLS = 256
MAX_TOOLS_BYTES = 4 * MAX_SCHEMA_BYTES

TOO_LARGE = "constraint_too_large"

#: keywords whose value is a map of names to subschemas
_MAPS = frozenset(("properties", "patternProperties", "$defs", "definitions", "dependentSchemas"))
#: keywords whose value is a list of subschemas
_LISTS = frozenset(("anyOf", "oneOf", "allOf", "prefixItems"))
#: keywords whose value is one subschema (``items`` may also be a list, before 2020-12)
_ONE = frozenset(("not", "if", "then", "else", "additionalProperties", "unevaluatedProperties",
                  "additionalItems", "contains", "propertyNames", "unevaluatedItems"))


def subschemas(node: dict) -> Iterator[tuple[str, Any]]:
    """``(path step, subschema)`` for every subschema directly inside ``node``; a property
    *named* ``pattern`` is a subschema under ``properties``, not the keyword."""
    for key, value in node.items():
        if key in _MAPS:
            if isinstance(value, dict):
                for i, (name, sub) in enumerate(value.items()):
                    yield f"{key}.{_name(name, i)}", sub
        elif key in _LISTS or key == "items":
            if isinstance(value, list):
                for i, sub in enumerate(value):
                    yield f"{key}[{i}]", sub
            elif key == "items" and isinstance(value, dict):
                yield key, value
        elif key in _ONE and isinstance(value, dict):
            yield key, value


def patterns(node: dict) -> Iterator[tuple[str, str]]:
    """``(path step, regular expression)`` of ``node`` itself: its ``pattern``, and the keys
    of its ``patternProperties``."""
    if isinstance(node.get("pattern"), str):
        yield "pattern", node["pattern"]
    pp = node.get("patternProperties")
    if isinstance(pp, dict):
        for i, key in enumerate(pp):
            yield f"patternProperties.{_name(key, i)}", key


def _name(key: str, i: int) -> str:
    """A key as a step of a field's path: itself when short and plain, else its position."""
    return key if len(key) <= 40 and key.isprintable() and "." not in key else f"[{i}]"


def resolve(root: dict, ref: str) -> dict | None:
    """The subschema a local ``$ref`` (``#``, ``#/$defs/name``, any JSON pointer) points to."""
    if ref != "#" and not ref.startswith("#/"):
        return None  # an anchor or another document: left to the grammar library
    node: Any = root
    for step in ref[2:].split("/") if ref != "#" else []:
        step = step.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict):
            node = node.get(step)
        elif isinstance(node, list) and step.isascii() and step.isdigit() and int(step) < len(node):
            node = node[int(step)]
        else:
            return None
    return node if isinstance(node, dict) else None


def schema_bytes(schema: object, param: str, limit: int = MAX_SCHEMA_BYTES) -> int:
    """The schema's size as compact JSON; ``ConstraintError`` past ``limit``."""
    size = len(json.dumps(schema, separators=(",", ":")))
    if size > limit:
        raise ConstraintError(f"'{param}' is {size} bytes of JSON; the limit is {limit}", param, TOO_LARGE)
    return size


def check_schema_limits(schema: dict, param: str) -> None:
    """Depth (``$ref`` hops included), ``$defs`` and ``$ref`` counts, the regular expressions
    inside, and ``$ref`` loops that could never produce output; ``ConstraintError`` naming
    ``param`` and the limit otherwise."""
    nodes: list[tuple[dict, str]] = []
    seen: set[int] = set()
    stack: list[tuple[Any, str]] = [(schema, "")]
    defs = refs = 0
    while stack:
        node, path = stack.pop()
        if not isinstance(node, dict) or id(node) in seen:
            continue
        seen.add(id(node))
        nodes.append((node, path))
        for key in ("$defs", "definitions"):
            if isinstance(node.get(key), dict):
                defs += len(node[key])
        if isinstance(node.get("$ref"), str):
            refs += 1
        for step, pattern in patterns(node):
            check_pattern(pattern, _join(param, path, step))
        for step, sub in subschemas(node):
            stack.append((sub, _join("", path, step)))
    if defs > MAX_SCHEMA_DEFS:
        raise ConstraintError(f"'{param}' defines {defs} schemas in $defs; the limit is {MAX_SCHEMA_DEFS}",
                              param, TOO_LARGE)
    if refs > MAX_SCHEMA_REFS:
        raise ConstraintError(f"'{param}' has {refs} $ref keywords; the limit is {MAX_SCHEMA_REFS}", param, TOO_LARGE)
    _check_depth(schema, nodes, param)


def _join(param: str, path: str, step: str) -> str:
    return ".".join(p for p in (param, path, step) if p)


def _check_depth(root: dict, nodes: list[tuple[dict, str]], param: str) -> None:
    """The longest chain of nested subschemas and ``$ref`` hops, by one iterative depth-first
    pass (a recursive schema, such as a tree whose children are trees, counts once around its
    loop). A loop made only of ``$ref`` and ``allOf`` hops consumes no output: refused."""
    paths = {id(n): p for n, p in nodes}
    done: dict[int, int] = {}  # id -> the depth below a finished node
    at: dict[int, int] = {}  # id -> its index on the current path
    # the current path: [node, edges left to follow, depth below it so far, entered by a consuming hop]
    path: list[list] = []

    def enter(node: dict, consumes: bool) -> None:
        at[id(node)] = len(path)
        path.append([node, _edges(root, node), 0, consumes])
        if len(path) > MAX_SCHEMA_DEPTH + 1:
            raise ConstraintError(f"'{param}' nests subschemas (and $ref hops) more than {MAX_SCHEMA_DEPTH} levels "
                                  f"deep; the limit is {MAX_SCHEMA_DEPTH}", param, TOO_LARGE)

    enter(root, True)
    while path:
        top = path[-1]
        if top[1]:
            child, consumes = top[1].pop()
            key = id(child)
            if key in at:  # back to a node on the path: a loop
                if not consumes and not any(entry[3] for entry in path[at[key] + 1:]):
                    where = paths.get(key) or "the root"
                    raise ConstraintError(f"'{param}' has a $ref loop that produces no output (at {where}): "
                                          "give the schema a way to end", param, "invalid_schema")
            elif key in done:
                top[2] = max(top[2], done[key] + 1)
            else:
                enter(child, consumes)
            continue
        path.pop()
        del at[id(top[0])]
        done[id(top[0])] = top[2]
        if path:
            path[-1][2] = max(path[-1][2], top[2] + 1)


def _edges(root: dict, node: dict) -> list[tuple[dict, bool]]:
    """The subschemas and ``$ref`` target of ``node``: (target, whether output is consumed
    before it: not through ``$ref`` and ``allOf``, which hold at the same place)."""
    out = [(sub, not step.startswith("allOf")) for step, sub in subschemas(node) if isinstance(sub, dict)]
    ref = node.get("$ref")
    target = resolve(root, ref) if isinstance(ref, str) else None
    if target is not None:
        out.append((target, False))
    return out


def check_pattern(pattern: str, param: str) -> None:
    """Length and group nesting of a regular expression (one pass, escapes and classes skipped)."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ConstraintError(f"'{param}' is a regular expression of {len(pattern)} characters; the limit is "
                              f"{MAX_PATTERN_CHARS}", param, TOO_LARGE)
    depth = deepest = 0
    i, n, in_class = 0, len(pattern), False
    while i < n:
        ch = pattern[i]
        if ch == "\\":
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch == "[":
            in_class = True
            if pattern.startswith("]", i + 1) or pattern.startswith("^]", i + 1):
                i += 1 + (pattern[i + 1] == "^")  # a leading ']' is a member of the class
        elif ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")":
            depth = max(0, depth - 1)
        i += 1
    if deepest > MAX_PATTERN_GROUP_DEPTH:
        raise ConstraintError(f"'{param}' nests groups {deepest} levels deep; the limit is {MAX_PATTERN_GROUP_DEPTH}",
                              param, TOO_LARGE)


def check_grammar(text: str, kind: str, param: str) -> None:
    """Size, rule count and bracket nesting of a Lark or GBNF grammar (quoted text, character
    classes, Lark's ``/regex/`` literals and comments skipped)."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_GRAMMAR_BYTES:
        raise ConstraintError(f"'{param}' is a grammar of {size} bytes; the limit is {MAX_GRAMMAR_BYTES}",
                              param, TOO_LARGE)
    # both syntaxes are counted: the GBNF converter passes Lark rules through
    rules = text.count("::=") + sum(1 for line in text.splitlines() if _lark_rule(line))
    if rules > MAX_GRAMMAR_RULES:
        raise ConstraintError(f"'{param}' has {rules} rules; the limit is {MAX_GRAMMAR_RULES}", param, TOO_LARGE)
    deepest = _nesting(text, kind)
    if deepest > MAX_GRAMMAR_NESTING:
        raise ConstraintError(f"'{param}' nests brackets {deepest} levels deep; the limit is {MAX_GRAMMAR_NESTING}",
                              param, TOO_LARGE)


def _lark_rule(line: str) -> bool:
    """``name:``, ``?name:``, ``!name:``, ``name.2:`` or ``TERMINAL:`` at the start of a line."""
    s = line.lstrip().lstrip("?!")
    end = 0
    while end < len(s) and (s[end].isalnum() or s[end] in "_."):
        end += 1
    return end > 0 and s[end:].lstrip().startswith(":") and not s[end:].lstrip().startswith("::")


def _nesting(text: str, kind: str) -> int:
    depth = deepest = 0
    i, n = 0, len(text)
    comment = "#" if kind == GBNF else "//"
    while i < n:
        ch = text[i]
        if text.startswith(comment, i):
            i = text.find("\n", i)
            if i < 0:
                break
        elif ch in "\"'" or (ch == "/" and kind != GBNF) or (ch == "[" and kind == GBNF):
            close = "]" if ch == "[" else ch
            i += 1
            while i < n and text[i] != close and text[i] != "\n":
                i += 2 if text[i] == "\\" else 1
        elif ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth = max(0, depth - 1)
        i += 1
    return deepest
