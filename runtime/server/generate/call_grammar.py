"""The grammar (Lark, for llguidance) of a reply made of tool calls, in the model's own syntax.

Built from the model's output contract (``runtime.chat.contract.CallSyntax``), so a forced call
is written exactly as the template renders calls: JSON bodies through ``%json`` with each tool's
parameters, tagged arguments as the tool's properties in order (string values as text that cannot
contain the argument's end marker, other values as JSON). The grammar starts with the syntax's
trigger, so the same grammar is enforced from the first token (``required`` or a named function)
or lazily from the trigger (``auto``).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

from runtime.chat.call_analysis import CALL_ID1
from runtime.chat.contract import JSON, KEY_SLOT, NAME_SLOT, PYTHON, TAGGED, CallSyntax, OutputContract
from runtime.engine.constraint_spec import JSON_OPTIONS
from runtime.server.generate.tool_relax import rebase

#: the most calls one reply may hold when parallel calls are allowed
MAX_PARALLEL = 4
#: a call id the model writes where the syntax carries one in its markers (Mistral's nine characters)
CALL_ID = "/[A-Za-z0-9]{9}/"


def call_grammar(syntax: CallSyntax, tools: list[dict], parallel: bool, answer: dict | None = None) -> str:
    """Lark text for one reply of calls to ``tools`` (OpenAI function tools). ``answer``: a JSON
    schema the reply may match instead of making calls (a response format beside tools)."""
    syntax = leading_trimmed(syntax)
    rules: list[str] = []
    if syntax.body == JSON:
        one = _json_call(syntax, tools, rules)
    else:
        one = _named_call(syntax, tools, rules)
    n = MAX_PARALLEL if parallel else 1
    sep = _lit(syntax.call_sep if syntax.call_sep.strip() else ("," if syntax.list_wrapped else syntax.call_sep))
    calls = _repeat("call", sep, n)
    head = _lit(syntax.section_start) + (' "["' if syntax.list_wrapped else "")
    tail = ('"]" ' if syntax.list_wrapped else "") + _lit(syntax.section_end)
    body = " ".join(x for x in (head, calls, tail) if x and x != '""')
    rules.insert(0, f"call: {one}")
    if answer is None:
        return "\n".join([f"start: {body}", *rules])
    answer_rule = "answer: %json " + json.dumps({**answer, "x-guidance": JSON_OPTIONS})
    return "\n".join(["start: calls | answer", f"calls: {body}", *rules, answer_rule])


def leading_trimmed(s: CallSyntax) -> CallSyntax:
    """The syntax with no whitespace before its first marker or after its last (the grammar and
    its trigger start at the first: a model need not write the newlines a template puts around
    its calls)."""
    s = replace(s, section_end=s.section_end.rstrip())
    if not s.section_end:
        s = replace(s, call_end=s.call_end.rstrip())
        if not s.call_end:
            s = replace(s, close=s.close.rstrip())
    s = replace(s, section_start=s.section_start.lstrip())
    if s.section_start:
        return s
    s = replace(s, call_start=s.call_start.lstrip())
    if s.call_start:
        return s
    return replace(s, name_prefix=s.name_prefix.lstrip())


def grammar_trigger(s: CallSyntax) -> str:
    """Where a lazily applied call grammar starts: the grammar's own first characters."""
    t = leading_trimmed(s)
    first = t.section_start or t.call_start or t.name_prefix
    if first:
        # up to a call id in the markers, which the model writes its own way
        return (first.split(CALL_ID1)[0] or first) if t.id_in_markers else first
    return "[{" if t.list_wrapped else "{"


def trigger_is_ambiguous(contract: OutputContract) -> bool:
    """Whether the calls' trigger also starts the answer's or the thinking's header (Muse Glimmer's
    ``to=`` of ``to=user<|message|>``, Functionary v3.2's ``>>>`` of ``>>>all``): a lazy grammar
    started there would force a call on an answer, so ``auto`` goes unconstrained (the parser
    reads the calls all the same)."""
    if contract.calls is None:
        return False
    trigger = grammar_trigger(contract.calls)
    r = contract.reasoning
    others = [contract.content_start, r.start if r is not None else ""]
    return any(m.strip() and m.strip().startswith(trigger) for m in others)


def _json_call(s: CallSyntax, tools: list[dict], rules: list[str]) -> str:
    schema = _call_schema(s, tools)
    rules.append("body: %json " + json.dumps(schema))
    return " ".join(x for x in (_lit(s.call_start), "body", _lit(s.call_end)) if x != '""')


def _named_call(s: CallSyntax, tools: list[dict], rules: list[str]) -> str:
    options = []
    for i, t in enumerate(tools):
        fn = t["function"]
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        if s.body in (TAGGED, PYTHON):
            args = _tagged_args(s, params, i, rules)
        else:
            rules.append(f"args{i}: %json " + json.dumps(_with_defs(params, i)))
            args = f"args{i}"
        suffix = s.name_suffix.replace(NAME_SLOT, fn["name"])  # (Muse Glimmer writes the name twice)
        if s.id_in_markers:
            head = " ".join((_marker(s.name_prefix), _lit(fn["name"]), _marker(suffix)))
        else:
            head = _lit(s.name_prefix + fn["name"] + suffix)
        parts = [head, args, _lit(s.close), _lit(s.call_end)]
        options.append(" ".join(x for x in parts if x and x != '""'))
    start = _marker(s.call_start) if s.id_in_markers else _lit(s.call_start)
    alts = " | ".join(f"({o})" for o in options)
    return f"{start} ({alts})" if start != '""' else f"({alts})"


def _tagged_args(s: CallSyntax, params: dict, i: int, rules: list[str]) -> str:
    found = params.get("properties")
    props: dict = found if isinstance(found, dict) else {}
    required = set(params.get("required") or [])
    items = []
    first = True
    for j, (key, prop) in enumerate(props.items()):
        name = f"a{i}_{j}"
        string = isinstance(prop, dict) and prop.get("type") == "string"
        mid = s.arg_mid if string or not s.arg_mid_json else s.arg_mid_json
        arg_end = s.arg_end.replace(KEY_SLOT, key)
        end_lit = _lit(arg_end)
        if string and s.body == PYTHON:
            # a Python string: its quote, escaped inside, around the text
            q = _re(s.string_quote or '"')
            rules.append(f"V{i}_{j}: /{q}(?:[^{q}\\\\\\n]|\\\\.){_length(prop)}{q}/")
            value, end_lit = f"V{i}_{j}", '""'
        elif string:
            # the text and its end marker are one lexeme: text that holds the marker only at its end
            # (a lexeme for the text alone would swallow the marker's first characters)
            stop = s.string_quote or arg_end
            core = stop.strip() or stop
            rules.append(f"V{i}_{j}: /(?s:.{_length(prop)}){_re(stop)}/ & ~/(?s:.*{_re(core)}(?s:.)+)/")
            value = f'{_lit(s.string_quote)} V{i}_{j}' if s.string_quote else f"V{i}_{j}"
            if not s.string_quote:
                end_lit = '""'
        else:
            value = f"v{i}_{j}"
            rules.append(f"v{i}_{j}: %json " + json.dumps({**(prop if isinstance(prop, dict) else {}),
                                                            "x-guidance": JSON_OPTIONS}))
        sep = "" if first else _lit(s.arg_sep)
        parts = [sep, _lit(s.arg_prefix + key + mid), value, end_lit]
        rules.append(f"{name}: " + " ".join(x for x in parts if x and x != '""'))
        items.append(name if key in required else f"{name}?")
        first = first and key not in required
    return " ".join(items) if items else '""'


def _length(prop: dict) -> str:
    """The regex repetition of a raw string value: the schema's minLength and maxLength (in
    characters, as JSON Schema counts them), ``*`` without them."""
    low, high = prop.get("minLength"), prop.get("maxLength")
    low = low if isinstance(low, int) and not isinstance(low, bool) and low > 0 else 0
    if isinstance(high, int) and not isinstance(high, bool) and high >= low:
        return f"{{{low},{high}}}"
    return f"{{{low},}}" if low else "*"


def _marker(marker: str) -> str:
    """Lark for a marker that may hold the template's example call id: the model writes an id of
    its own there (each call of a reply its own; the same id in every call would make a client
    match every tool result to the first call)."""
    out: list[str] = []
    for i, piece in enumerate(marker.split(CALL_ID1)):
        if i:
            out.append(CALL_ID)
        if piece:
            out.append(_lit(piece))
    return " ".join(out) or '""'


def _re(text: str) -> str:
    """``text`` as a literal inside a Lark ``/regex/`` (control characters as escapes)."""
    out = []
    for ch in text:
        if ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "/":
            out.append("\\/")
        else:
            out.append(re.escape(ch))
    return "".join(out)


def _repeat(item: str, sep: str, n: int) -> str:
    """``item`` then up to ``n - 1`` more, each after ``sep`` (Lark)."""
    if n <= 1:
        return item
    joint = f"{sep} " if sep and sep != '""' else ""
    return f"{item} ({joint}{_repeat(item, sep, n - 1)})?"


def _lit(s: str) -> str:
    return json.dumps(s) if s else '""'


def _with_defs(params: dict, i: int) -> dict:
    if '"$ref"' in json.dumps(params):
        return {"$ref": f"#/$defs/tool{i}", "$defs": {f"tool{i}": rebase(params, f"#/$defs/tool{i}")},
                "x-guidance": JSON_OPTIONS}
    return {**params, "x-guidance": JSON_OPTIONS}


def _extra_key(example: str) -> dict:
    """The schema of a key the template writes beside the name (Command R7B's ``tool_call_id``,
    the call's index as a string): the example's shape, bounded, so a model cannot write on
    inside it until ``max_tokens``."""
    if example.isdigit():
        return {"type": "string", "pattern": "^[0-9]{1,6}$"}
    return {"type": "string", "maxLength": 64}


def _call_schema(s: CallSyntax, tools: list[dict]) -> dict:
    """One JSON schema for a call to any of ``tools`` in the syntax's object shape. Local
    ``$ref`` keywords move to ``$defs.toolN`` of the call's schema, rebased."""
    options, defs = [], {}
    for i, t in enumerate(tools):
        fn = t["function"]
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        if '"$ref"' in json.dumps(params):
            defs[f"tool{i}"] = rebase(params, f"#/$defs/tool{i}")
            params = {"$ref": f"#/$defs/tool{i}"}
        if s.name_is_key:
            options.append({"type": "object", "properties": {fn["name"]: params}, "required": [fn["name"]],
                            "additionalProperties": False})
            continue
        props: dict = {k: _extra_key(example) for k, example in s.extra_keys}
        props.update({s.name_key: {"const": fn["name"]}, s.args_key: params})
        options.append({"type": "object", "properties": props, "required": list(props), "additionalProperties": False})
    schema: dict = options[0] if len(options) == 1 else {"anyOf": options}
    if defs:
        schema = {**schema, "$defs": defs}
    return {**schema, "x-guidance": JSON_OPTIONS}
