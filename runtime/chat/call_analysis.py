"""How a template writes tool calls, found by rendering it with and without calls.

The probes (after llama.cpp's ``chat-diff-analyzer.cpp``): a conversation whose last assistant turn
is plain text, against the same turn holding one call, two calls, a call with two arguments and a
call with a number argument. The names, keys and values are unique needles, so where each lands in
the difference tells the call's structure: whether the arguments are one JSON object, whether that
object also holds the name, which markers surround the name, each argument and each call, and
which markers are written once around all the calls of a reply.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from runtime.chat.contract import JSON, KEY_SLOT, NAME_JSON, NAME_SLOT, TAGGED, CallSyntax
from runtime.chat.text_diff import diff, last_marker, lcp, lcs, markers

FUN1, FUN2 = "FFF_FIRST_FUN_F", "SSS_SECOND_FUN_S"
ARG1, ARG2 = "AA_ARG_FST_AA", "BB_ARG_SND_BB"
VAL1, VAL2, VAL3 = "XXX_VAL_ONE_XXX", "YYY_VAL_TWO_YYY", "ZZZ_VAL_THR_ZZZ"
NUM = 7351
CALL_ID1, CALL_ID2 = "call00001", "call00002"
USER = {"role": "user", "content": "U_USER_MSG Hello END_U"}
TEXT = "A_ASST_MSG I can help END_A"

#: render(messages, tools) -> prompt text, or None when the template refuses the conversation
Render = Callable[[list[dict], list[dict] | None], "str | None"]


def probe_tools() -> list[dict]:
    params = {"type": "object", "properties": {ARG1: {"type": "string"}, ARG2: {"type": "string"}}, "required": [ARG1]}
    return [{"type": "function", "function": {"name": n, "description": "probe", "parameters": params}} for n in (FUN1, FUN2)]


def _call(name: str, args: dict, cid: str) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def analyze_calls(render: Render) -> CallSyntax | None:
    """The template's call syntax, or None when it renders no tool calls. The calls are probed
    beside a turn's text, then (as llama.cpp probes them) in a turn with no text: some templates
    render a turn's calls only where it has none (llama.cpp's DeepSeek R1 template)."""
    for content in (TEXT, ""):
        syntax = _analyze(render, content)
        if syntax is not None:
            return syntax
    return None


def _analyze(render: Render, content: str) -> CallSyntax | None:
    def _turn(*calls: dict) -> list[dict]:
        return [USER, {"role": "assistant", "content": content, "tool_calls": list(calls)}]

    tools = probe_tools()
    base = render([USER, {"role": "assistant", "content": TEXT}], tools)
    one = render(_turn(_call(FUN1, {ARG1: VAL1}, CALL_ID1)), tools)
    if base is None or one is None:
        return None
    turn_end = base[base.find(TEXT) + len(TEXT):] if TEXT in base else ""
    h1 = _trim(diff(base, one)[1], turn_end)
    if FUN1 not in h1:
        return None
    two = render(_turn(_call(FUN1, {ARG1: VAL1}, CALL_ID1), _call(FUN2, {ARG1: VAL2}, CALL_ID2)), tools)
    h2 = _trim(diff(base, two)[1], turn_end).replace(CALL_ID2, CALL_ID1) if two is not None else None
    args_at = _json_args(h1)
    if args_at is not None:
        syntax = _json_bodied(h1, h2, args_at)
    else:
        pair = render(_turn(_call(FUN1, {ARG1: VAL1, ARG2: VAL3}, CALL_ID1)), tools)
        num = render(_turn(_call(FUN1, {ARG1: NUM}, CALL_ID1)), tools)
        syntax = _tagged(h1, h2, _trim(diff(base, pair)[1], turn_end) if pair else None,
                         _trim(diff(base, num)[1], turn_end) if num else None)
    if syntax is None:
        return None
    syntax = replace(syntax, name_suffix=syntax.name_suffix.replace(FUN1, NAME_SLOT))
    return replace(syntax, id_in_markers=CALL_ID1 in syntax.name_prefix + syntax.name_suffix + syntax.call_start)


def _trim(h: str, turn_end: str) -> str:
    """``h`` without what follows the calls and also ends a plain turn (``<|im_end|>``), and
    without the plain text the probe put before the calls."""
    if TEXT in h:  # the calls follow the turn's text, or (Gemma 4) come before it
        before, after = h[:h.find(TEXT)], h[h.find(TEXT) + len(TEXT):]
        h = after if FUN1 in after else before
    ends = set(markers(turn_end))
    while True:
        m = last_marker(h)
        if m is None or m.group() not in ends or h[m.end():].strip():
            return h
        h = h[:m.start()]


def _json_args(h: str) -> tuple[int, int] | None:
    """Where the arguments object ``{ARG1: VAL1}`` is in ``h``, as JSON."""
    key = h.find(json.dumps(ARG1))
    if key < 0:
        return None
    start = h.rfind("{", 0, key)
    if start < 0:
        return None
    try:
        value, end = json.JSONDecoder().raw_decode(h, start)
    except ValueError:
        return None
    return (start, end) if value == {ARG1: VAL1} else None


def _outer_json(h: str, inner: tuple[int, int]) -> tuple[int, int, Any] | None:
    """The outermost JSON value in ``h`` that holds the arguments and the function's name."""
    found = None
    for p in range(inner[0] - 1, -1, -1):
        if h[p] not in "[{":
            continue
        try:
            value, end = json.JSONDecoder().raw_decode(h, p)
        except ValueError:
            continue
        if end >= inner[1] and FUN1 in json.dumps(value):
            found = (p, end, value)
    return found


def _json_bodied(h1: str, h2: str | None, args: tuple[int, int]) -> CallSyntax | None:
    outer = _outer_json(h1, args)
    if outer is None:  # the name sits in markers, the arguments are JSON
        fun = h1.find(FUN1)
        if fun > args[0]:
            return None
        syntax = CallSyntax(NAME_JSON, name_prefix=h1[:fun], name_suffix=h1[fun + len(FUN1):args[0]], close=h1[args[1]:])
        return _split_calls(syntax, h1, h2, body=(fun, args[1]), second=FUN2)
    start, end, value = outer
    listed = isinstance(value, list)
    item = value[0] if listed and value else value
    if not isinstance(item, dict):
        return None
    keys = list(item)
    if FUN1 in item:
        syntax = CallSyntax(JSON, name_is_key=True)
    else:
        name_key = next((k for k, v in item.items() if v == FUN1), None)
        args_key = next((k for k, v in item.items() if v == {ARG1: VAL1} or v == json.dumps({ARG1: VAL1})), None)
        if name_key is None or args_key is None:
            return None
        extra = tuple((k, str(item[k])) for k in keys[:keys.index(name_key)])
        syntax = CallSyntax(JSON, name_key=name_key, args_key=args_key, extra_keys=extra)
    if listed:
        sep = ", "
        if h2 is not None:
            two = _outer_json(h2, (h2.find(json.dumps(ARG1)), h2.find(json.dumps(ARG1)) + 1))
            if two is not None and isinstance(two[2], list) and len(two[2]) == 2:
                text = h2[two[0]:two[1]]
                at = text.find(FUN2)
                sep = text[:text.rfind("{", 0, at)]
                sep = sep[sep.rfind("}") + 1:]
        return replace(syntax, list_wrapped=True, section_start=h1[:start], section_end=h1[end:], call_sep=sep)
    return _split_calls(syntax, h1, h2, body=(start, end), second=FUN2)


def _split_calls(syntax: CallSyntax, h1: str, h2: str | None, body: tuple[int, int], second: str) -> CallSyntax:
    """Which of the markers around one call's ``body`` repeat per call (two calls rendered)."""
    opener, closer = h1[:body[0]], h1[body[1]:]
    if syntax.body != JSON:
        opener, closer = syntax.name_prefix, syntax.close
    between = None
    if h2 is not None:
        at2 = h2.find(second)
        first_end = _end_of_first(h2, syntax)
        if at2 > 0 and first_end is not None and first_end <= at2:
            between = h2[first_end:at2]
            if syntax.body == JSON:
                between = between[:between.rfind("{")] if "{" in between else between
    if between is None:  # one call per reply: every marker is the call's
        per_open, per_close, sep = opener, closer, ""
    else:
        per_open = lcs(opener, between)
        per_close = lcp(closer, between[:len(between) - len(per_open)])
        sep = between[len(per_close):len(between) - len(per_open)]
    section_start, section_end = opener[:len(opener) - len(per_open)], closer[len(per_close):]
    if syntax.body == JSON:
        return replace(syntax, section_start=section_start, section_end=section_end, call_start=per_open,
                       call_end=per_close, call_sep=sep)
    return replace(syntax, section_start=section_start, section_end=section_end, name_prefix=per_open,
                   close=per_close, call_sep=sep)


def _end_of_first(h2: str, syntax: CallSyntax) -> int | None:
    """Where the first call's arguments end in the two-call render."""
    if syntax.body in (JSON, NAME_JSON):
        first = h2.find("{", h2.find(FUN1) if syntax.body == NAME_JSON else 0)
        if syntax.body == JSON:
            first = h2.rfind("{", 0, h2.find(FUN1))
        try:
            return json.JSONDecoder().raw_decode(h2, first)[1]
        except ValueError:
            return None
    at = h2.find(VAL1)
    if at < 0:
        return None
    end = at + len(VAL1)
    closing = syntax.string_quote + syntax.arg_end.replace(KEY_SLOT, ARG1)
    return end + len(closing) if h2.startswith(closing, end) else end


def _tagged(h1: str, h2: str | None, pair: str | None, num: str | None) -> CallSyntax | None:
    """Arguments written as one marked pair each (``<parameter=KEY>VALUE</parameter>``)."""
    fun, key, val = h1.find(FUN1), h1.find(ARG1), h1.find(VAL1)
    if not 0 <= fun < key < val:
        return None
    x = h1[fun + len(FUN1):key]  # name suffix + argument prefix
    mid = h1[key + len(ARG1):val]
    z = h1[val + len(VAL1):]  # argument end + close + ...
    arg_prefix, arg_end, arg_sep = "", "", ""
    if pair is not None and VAL3 in pair:
        y = pair[pair.find(VAL1) + len(VAL1):pair.find(ARG2)]  # argument end + separator + prefix
        arg_prefix = lcs(x, y)
        arg_end = lcp(y[:len(y) - len(arg_prefix)], z)
        arg_sep = y[len(arg_end):len(y) - len(arg_prefix)]
    name_suffix = x[:len(x) - len(arg_prefix)]
    close = z[len(arg_end):]
    quote, raw, mid_json = "", True, ""
    if num is not None and str(NUM) in num:
        at = num.find(str(NUM))
        num_mid = num[num.find(ARG1) + len(ARG1):at]
        if num_mid != mid and mid.startswith(num_mid) and arg_end.startswith(mid[len(num_mid):]):
            quote = mid[len(num_mid):]
            mid, arg_end = num_mid, arg_end[len(quote):]
        elif num_mid != mid:
            mid_json = num_mid
    if ARG1 in arg_end:  # the argument's name is its own closing tag
        arg_end = arg_end.replace(ARG1, KEY_SLOT)
    syntax = CallSyntax(TAGGED, name_prefix=h1[:fun], name_suffix=name_suffix, close=close, arg_prefix=arg_prefix,
                        arg_mid=mid, arg_end=arg_end, arg_sep=arg_sep, string_quote=quote, raw_strings=raw, arg_mid_json=mid_json)
    return _split_calls(syntax, h1, h2, body=(fun, val + len(VAL1) + len(arg_end)), second=FUN2)


def name_pattern(text: str) -> str:
    """A marker with its example index and call id made general (``:0`` -> ``:\\d+``)."""
    out = re.escape(text)
    out = out.replace(re.escape(CALL_ID1), r"(?P<id>[\w\-]+)").replace(re.escape(NAME_SLOT), r"[\w.\-]+")
    return re.sub(r"(?<![A-Za-z_])\d+(?![A-Za-z_])", r"\\d+", out)
