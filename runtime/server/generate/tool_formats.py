"""Tool-call formats per model family: how calls are marked, parsed, constrained and rendered.

Families (detected from the chat template's text by :func:`detect_format`):

- ``hermes`` (Hermes 2/3, Qwen 2.5 / Qwen 3, SmolLM3): ``<tool_call>\\n{"name": ..., "arguments":
  {...}}\\n</tool_call>``, one block per call;
- ``smollm2`` (SmolLM2's published function-calling prompt): ``<tool_call>[{"name": ...,
  "arguments": {...}}, ...]</tool_call>``; its template has no tools, so the tools are
  described in the system message;
- ``llama3`` (Llama 3.1-3.3): a bare ``{"name": ..., "parameters": {...}}`` object, or
  ``<|python_tag|>`` followed by such an object or a built-in call ``tool.call(key="value")``;
- ``mistral``: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` (Nemo and earlier) or
  ``[TOOL_CALLS]name[ARGS]{...}`` (newer templates);
- ``phi4`` (Phi-4-mini): ``<|tool_call|>[{"name": ..., "arguments": {...}}]<|/tool_call|>``;
- ``gemma`` (Gemma 3 prompts for function calling): a fenced ````tool_code```` block holding
  Python calls ``name(key=value)``;
- ``generic`` (any other model, and models without a template): ``{"tool_calls": [{"name":
  ..., "arguments": {...}}]}``, the tools described in the system message.

The grammar of a family's call starts with its trigger (the opening markup), so the same grammar
is enforced from the first token (``tool_choice`` required or named) or lazily from the trigger
(``auto``).
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from typing import Any

from runtime.engine.constraint_spec import JSON_OPTIONS
from runtime.server.generate.tool_relax import rebase
from runtime.server.validation import json_text

#: the most calls one reply may hold when parallel calls are allowed
MAX_PARALLEL = 4


@dataclass(slots=True, frozen=True)
class ToolFormat:
    name: str
    #: markers that open a call (the first is the one the grammar writes)
    starts: tuple[str, ...]
    #: marker that closes a call, or None: the body is one JSON value
    end: str | None
    #: the opening marker is part of the JSON body (``{"name"`` for Llama 3)
    marker_in_body: bool = False
    #: the body is a JSON list of calls
    list_body: bool = False
    #: the chat template renders ``tools`` itself
    native: bool = True
    #: the key of the arguments in a call object
    args_key: str = "arguments"

    # -- parsing --------------------------------------------------------------------
    def find_start(self, buf: str) -> tuple[int, str]:
        best, marker = -1, ""
        for m in self.starts:
            at = buf.find(m)
            if at >= 0 and (best < 0 or at < best):
                best, marker = at, m
        if best >= 0 and self.marker_in_body and marker.startswith("{"):
            return best, ""  # the marker stays in the buffer: it is the body's start
        return best, marker

    def held(self, buf: str) -> int:
        from runtime.server.generate.output_events import _held

        return max(_held(buf, m) for m in self.starts)

    def split_body(self, buf: str, final: bool) -> tuple[str | None, str]:
        """(the call's body, what follows it), or (None, buf) while it is incomplete."""
        if self.end is not None and not (self.marker_in_body and buf.lstrip().startswith("{")):
            at = buf.find(self.end)
            if at < 0:
                return (buf, "") if final and _json_end(buf.strip()) is not None else (None, buf)
            return buf[:at], buf[at + len(self.end):]
        stripped = buf.lstrip()
        if self.name == "mistral" and stripped and stripped[0] not in "[{":
            at = stripped.find("[ARGS]")  # name[ARGS]{...}
            if at < 0:
                return None, buf
            end = _json_end(stripped[at + 6:])
            if end is None:
                return None, buf
            return stripped[:at + 6 + end], stripped[at + 6 + end:]
        end = _json_end(stripped)
        if end is None:
            if final and self.name == "llama3" and stripped:
                return stripped, ""  # a built-in call after <|python_tag|>
            return None, buf
        return stripped[:end], stripped[end:]

    def parse_body(self, body: str) -> list[tuple[str, dict]] | None:
        """The calls in a body, or None when it is not a well-formed call."""
        body = body.strip()
        if self.name == "gemma" and not body.startswith("{"):
            return _python_calls(body)
        if self.name == "mistral" and body and body[0] not in "[{":
            name, _, args = body.partition("[ARGS]")
            value = _loads(args)
            return [(name.strip(), value)] if isinstance(value, dict) and name.strip() else None
        value = _loads(body)
        if value is None and self.name == "llama3":
            return _python_calls(body)
        if isinstance(value, dict) and ("tool_calls" in value or "tool_call" in value):
            value = value.get("tool_calls", [value.get("tool_call")])
        if isinstance(value, dict):
            value = [value]
        if not isinstance(value, list) or not value:
            return None
        calls: list[tuple[str, dict]] = []
        for item in value:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                return None
            given: Any = item.get("arguments", item.get("parameters", {}))
            args = _loads(given) if isinstance(given, str) else given
            if not isinstance(args, dict):
                return None
            calls.append((item["name"], args))
        return calls

    # -- grammar --------------------------------------------------------------------
    def grammar(self, tools: list[dict], parallel: bool, answer: dict | None = None) -> str:
        """Lark text for one reply made of calls to ``tools`` (OpenAI function tools); it
        starts with :attr:`trigger`. ``answer``: a JSON schema the reply may match instead of
        making calls (a response format beside tools)."""
        call = "call: %json " + json.dumps(_call_schema(tools, self.args_key))
        n = MAX_PARALLEL if parallel and self.name != "llama3" else 1
        calls = _repeat("call", _lit(", "), n)
        rules = []
        if self.name in ("generic", "gemma"):
            body = f"{_lit('{' + chr(34) + 'tool_calls' + chr(34) + ': [')} {calls} {_lit(']}')}"
        elif self.list_body:
            body = f"{_lit(self.starts[0] + '[')} {calls} {_lit(']' + (self.end or ''))}"
        elif self.name == "llama3":
            body = "call"
        else:
            body = _repeat("one", _lit(chr(10)), n)
            rules.append(f"one: {_lit(self.starts[0] + chr(10))} call {_lit(chr(10) + (self.end or ''))}")
        if answer is None:
            return "\n".join([f"start: {body}", *rules, call])
        answer_rule = "answer: %json " + json.dumps({**answer, "x-guidance": JSON_OPTIONS})
        return "\n".join(["start: calls | answer", f"calls: {body}", *rules, call, answer_rule])

    @property
    def trigger(self) -> str:
        """Where a lazily applied grammar starts (the grammar's own first characters)."""
        return GENERIC.starts[0] if self.name == "gemma" else self.starts[0]

    # -- rendering (conversation history for templates that do not render tool calls) --
    def render_calls(self, calls: list[tuple[str, dict]]) -> str:
        objs = [{"name": n, "arguments": a} for n, a in calls]
        if self.name == "generic":
            return json.dumps({"tool_calls": objs}, ensure_ascii=False)
        if self.list_body:
            return f"{self.starts[0]}{json.dumps(objs, ensure_ascii=False)}{self.end or ''}"
        return "\n".join(f"{self.starts[0]}\n{json.dumps(o, ensure_ascii=False)}\n{self.end}" for o in objs)


def _repeat(item: str, sep: str, n: int) -> str:
    """``item`` then up to ``n - 1`` more, each after ``sep`` (Lark)."""
    return item if n <= 1 else f"{item} ({sep} {_repeat(item, sep, n - 1)})?"


def _lit(s: str) -> str:
    return json.dumps(s) if s else '""'


def _call_schema(tools: list[dict], args_key: str) -> dict:
    """One JSON schema for a call to any of ``tools``. A tool's parameters that use local
    ``$ref`` keywords (``#/$defs/...``, as pydantic writes them) move to ``$defs.toolN`` of the call's
    schema, their references rebased, since a ``$ref`` resolves against the document's root."""
    options, defs = [], {}
    for i, t in enumerate(tools):
        fn = t["function"]
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        if '"$ref"' in json.dumps(params):
            defs[f"tool{i}"] = rebase(params, f"#/$defs/tool{i}")
            params = {"$ref": f"#/$defs/tool{i}"}
        options.append({"type": "object", "properties": {"name": {"const": fn["name"]}, args_key: params},
                        "required": ["name", args_key], "additionalProperties": False})
    schema: dict = options[0] if len(options) == 1 else {"anyOf": options}
    if defs:
        schema = {**schema, "$defs": defs}
    return {**schema, "x-guidance": JSON_OPTIONS}


def _loads(text: str):
    """A call's JSON as the model wrote it, or None: malformed, or past the body's depth and
    number limits (a deep or huge value is never worth a stack or a quadratic parse)."""
    try:
        return json_text(text)
    except ValueError:
        return None


class JsonEnd:
    """Finds where a JSON object ends, fed the text as it grows (each character read once)."""

    __slots__ = ("pos", "depth", "in_str", "esc")

    def __init__(self, pos: int) -> None:
        self.pos, self.depth, self.in_str, self.esc = pos, 0, False, False

    def end(self, text: str) -> int | None:
        """The index just past the object in ``text``, or None while it is still open."""
        depth, in_str, esc = self.depth, self.in_str, self.esc
        i = self.pos
        n = len(text)
        while i < n:
            ch = text[i]
            i += 1
            if in_str:
                if esc:
                    esc = False
                elif ch == "\\":
                    esc = True
                elif ch == '"':
                    in_str = False
            elif ch == '"':
                in_str = True
            elif ch in "[{":
                depth += 1
            elif ch in "]}":
                depth -= 1
                if depth == 0:
                    return i
        self.pos, self.depth, self.in_str, self.esc = i, depth, in_str, esc
        return None


def _json_end(text: str) -> int | None:
    """The end of the JSON object or array at the start of ``text``, or None if incomplete."""
    if not text or text[0] not in "[{":
        return None
    return JsonEnd(0).end(text)


def _python_calls(body: str) -> list[tuple[str, dict]] | None:
    """``name(key=value, ...)`` lines (Gemma's tool_code, Llama's built-in ``x.call(...)``)."""
    try:
        tree = ast.parse(body.strip(), mode="exec")
    except (SyntaxError, RecursionError, MemoryError):  # deeply nested text: not a call
        return None
    calls = []
    for stmt in tree.body:
        node = stmt.value if isinstance(stmt, ast.Expr) else None
        if not isinstance(node, ast.Call) or node.args:
            return None
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "call" and isinstance(f.value, ast.Name):
            name = f.value.id  # brave_search.call(query=...)
        elif isinstance(f, ast.Name):
            name = f.id
        else:
            return None
        try:
            args = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            return None
        calls.append((name, args))
    return calls or None


HERMES = ToolFormat("hermes", ("<tool_call>",), "</tool_call>")
SMOLLM2 = ToolFormat("smollm2", ("<tool_call>",), "</tool_call>", list_body=True, native=False)
LLAMA3 = ToolFormat("llama3", ('{"name"', "<|python_tag|>", '{"type": "function"'), None,
                    marker_in_body=True, args_key="parameters")
MISTRAL = ToolFormat("mistral", ("[TOOL_CALLS]",), None, list_body=True)
PHI4 = ToolFormat("phi4", ("<|tool_call|>",), "<|/tool_call|>", list_body=True)
GEMMA = ToolFormat("gemma", ("```tool_code\n", '{"tool_calls"'), "\n```", marker_in_body=True, native=False)
GENERIC = ToolFormat("generic", ('{"tool_calls"',), None, marker_in_body=True, native=False)
FORMATS = {f.name: f for f in (HERMES, SMOLLM2, LLAMA3, MISTRAL, PHI4, GEMMA, GENERIC)}


def detect_format(template: str | None) -> ToolFormat:
    """The family's format from the chat template's text (None: no template -> generic)."""
    t = template or ""
    if "[TOOL_CALLS]" in t:
        return MISTRAL
    if "<|tool_call|>" in t:
        return PHI4
    if "<|python_tag|>" in t or ("<|start_header_id|>" in t and "tools" in t):
        return LLAMA3
    if "<tool_call>" in t:
        return HERMES
    if "<start_of_turn>" in t:
        return GEMMA
    if "<|im_start|>" in t:
        return SMOLLM2  # ChatML without tool markup: SmolLM2's published prompt
    return GENERIC


def supports_tools(template: str | None) -> bool:
    """Whether the template renders tools itself (models whose template does not still get
    tool calling, with the tools described in the system message)."""
    return template is not None and "tools" in template


def template_capabilities(template: str | None) -> dict[str, bool]:
    """What ``/v1/models`` reports: ``tools`` when the template renders them itself (any model
    gets tool calling through the system message), ``reasoning`` when it has a thinking block."""
    return {"tools": supports_tools(template), "reasoning": template is not None and "<think>" in template}
