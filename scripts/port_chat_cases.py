#!/usr/bin/env python3
"""Port llama.cpp's chat-output parser tests (tests/test-chat.cpp) to JSON data.

Usage:
    port_chat_cases.py PATH/TO/test-chat.cpp [OUT.json]

The output (default: tests/chat/llama_chat_cases.json next to this repository's
scripts/ folder) holds, for every parse test of the file, the template, the
model output the parser is given, the request parameters and the expected
message, so that Hearth's own template-derived parser can be run against the
same cases.

Nothing is hand-copied from the C++ file except the semantics of a handful of
small helper functions (simple_assist_msg and friends), and those are only used
while the C++ source of each helper still reads exactly as it did when it was
ported (a fingerprint of its tokens is compared). Everything else -- the shared
tools and messages, the local ones, and every case -- is extracted by a small
C++ subset interpreter:

  * a lexer that decodes string literals exactly (adjacent literal
    concatenation, simple/octal/hex/universal escapes, raw strings with or
    without a delimiter, u8/u/U/L prefixes);
  * a statement interpreter for the test functions: blocks, declarations,
    member assignments, range-for loops over braced lists, calls to other test
    functions in the file (their bodies are interpreted with the arguments
    bound), ``if`` statements (the condition is evaluated with the globals at
    their initial values, i.e. as in a run without command-line arguments, and
    tests in a branch that run does not take are listed as skipped; where it
    cannot be evaluated the body is interpreted and the condition kept with its
    cases), try/catch around a direct parse whose failure is asserted;
  * an expression evaluator for literals, ``+`` on strings, braced
    initializer lists, the ``peg_tester``/``peg_test_builder`` fluent API and
    the message helpers.

A test chain the interpreter cannot evaluate is listed under "skipped" with its
line and the reason; no value is ever guessed.

Python 3 standard library only.
"""

import copy
import hashlib
import json
import os
import re
import sys
from collections import Counter, OrderedDict

DEFAULT_SOURCE = "llama.cpp tests/test-chat.cpp as vendored by llama-cpp-python 0.3.36"

SEMANTICS = (
    "Each case is one llama.cpp PEG chat-parser test. The request is rendered with the named "
    "template (llama.cpp models/templates/<template>) from: messages (null = [message_user], one "
    "user turn 'Hey there!'), tools (null = none), tool_choice (null = auto), parallel_tool_calls "
    "(null = false), reasoning_format (null = none), enable_thinking (null = true), "
    "add_generation_prompt (null = true), continue_final_message (null = none; 'content' or "
    "'reasoning_content' = the last message is an assistant prefill that the model continues in "
    "that field, and the expected field holds the prefill plus the continuation) and json_schema "
    "(null = none; otherwise a response format the output follows). 'input' is only the text the "
    "model generated after that prompt: the generation prompt (e.g. '<|im_start|>assistant\\n', "
    "which for many reasoning templates already opens a thinking block such as '<think>\\n') is "
    "not part of it, so an input may start inside the reasoning and contain only its closing tag; "
    "the parser has to know the generation prompt. reasoning_format says where reasoning goes: "
    "'none' keeps the thinking text inline in content verbatim, its tags included (also an opening "
    "tag that came from the generation prompt), while tool calls and other format markup are still "
    "parsed; 'auto' and 'deepseek' move it, without the tags, to reasoning_content. The parse result "
    "is compared with 'expect': content and reasoning_content after stripping leading and trailing "
    "whitespace on both sides; tool calls in number and order, the name exactly, the id exactly "
    "(an empty id means the parser reports none; no ids are generated) and the arguments as JSON "
    "values, object key order included (llama.cpp keeps insertion order and compares the "
    "re-serialized JSON). 'arguments_raw' is the expected string as written in the C++; "
    "'arguments' is its parsed value, or null when it is not complete JSON (partial cases only): "
    "then the actual arguments must not be complete JSON either (llama.cpp renormalizes both to an "
    "empty string). is_partial true means the output was cut off and is parsed as a partial "
    "message. For every case llama.cpp also parses each prefix of the input (cut on UTF-8 "
    "boundaries) as partial output and requires the streamed diffs to add up to the expected "
    "message, and when not partial parses the whole input as final. expect_reconstruction true "
    "further requires that rendering the request plus the expected assistant message without a "
    "generation prompt gives the prompt followed by the input, exactly or as a prefix. expect_fail "
    "true (expect null) means one non-streaming parse of the input must raise an error. "
    "'condition', where present, is the C++ condition the test runs under. Names in 'tools' and "
    "'messages' refer to the top-level 'tools' (OpenAI function tools) and 'messages' (OpenAI chat "
    "messages whose tool-call arguments are JSON values, or the raw string where not valid JSON); "
    "'line' is the line of the test call in test-chat.cpp (shared by the templates a loop or helper "
    "runs it for)."
)

# ---------------------------------------------------------------------------
# Lexer
# ---------------------------------------------------------------------------

STRING_PREFIXES = {"", "u8", "u", "U", "L", "R", "u8R", "uR", "UR", "LR"}
PUNCT = [
    "...", "<<=", ">>=", "->*", "::", "->", "&&", "||", "==", "!=", "<=", ">=", "++", "--",
    "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "<<", ".*",
]
SIMPLE_ESCAPES = {
    "n": 0x0A, "t": 0x09, "r": 0x0D, "a": 0x07, "b": 0x08, "f": 0x0C, "v": 0x0B,
    "\\": 0x5C, "'": 0x27, '"': 0x22, "?": 0x3F,
}


class Tok:
    __slots__ = ("kind", "val", "line", "raw")

    def __init__(self, kind, val, line, raw=None):
        self.kind = kind  # id, num, str, chr, op
        self.val = val  # str for id/num/op, bytes for str, int for chr
        self.line = line
        self.raw = raw

    def is_op(self, v):
        return self.kind == "op" and self.val == v

    def is_id(self, v=None):
        return self.kind == "id" and (v is None or self.val == v)

    def __repr__(self):
        return "Tok(%s,%r,%d)" % (self.kind, self.val, self.line)


class CxxError(Exception):
    pass


def _decode_escapes(body, line):
    """Decode the body of a non-raw C++ narrow string literal to bytes."""
    out = bytearray()
    i = 0
    n = len(body)
    while i < n:
        c = body[i]
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        i += 1
        if i >= n:
            raise CxxError("line %d: dangling backslash in string literal" % line)
        c = body[i]
        if c in SIMPLE_ESCAPES:
            out.append(SIMPLE_ESCAPES[c])
            i += 1
        elif c in "01234567":
            j = i
            while j < n and j < i + 3 and body[j] in "01234567":
                j += 1
            v = int(body[i:j], 8)
            if v > 0xFF:
                raise CxxError("line %d: octal escape out of range" % line)
            out.append(v)
            i = j
        elif c == "x":
            j = i + 1
            while j < n and body[j] in "0123456789abcdefABCDEF":
                j += 1
            if j == i + 1:
                raise CxxError("line %d: \\x without digits" % line)
            v = int(body[i + 1:j], 16)
            if v > 0xFF:
                raise CxxError("line %d: hex escape out of range" % line)
            out.append(v)
            i = j
        elif c in "uU":
            width = 4 if c == "u" else 8
            digits = body[i + 1:i + 1 + width]
            if len(digits) != width or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise CxxError("line %d: bad universal character name" % line)
            out += chr(int(digits, 16)).encode("utf-8")
            i += 1 + width
        else:
            raise CxxError("line %d: unknown escape \\%s" % (line, c))
    return bytes(out)


def lex(src):
    toks = []
    i = 0
    n = len(src)
    line = 1
    at_line_start = True
    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
            at_line_start = True
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if c == "\\" and src.startswith("\\\n", i):
            i += 2
            line += 1
            continue
        if src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
            continue
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            if j < 0:
                raise CxxError("line %d: unterminated comment" % line)
            line += src.count("\n", i, j)
            i = j + 2
            continue
        if c == "#" and at_line_start:
            # preprocessor directive, with continuation lines
            while i < n:
                j = src.find("\n", i)
                if j < 0:
                    i = n
                    break
                if src[j - 1] == "\\":
                    line += 1
                    i = j + 1
                    continue
                i = j
                break
            continue
        at_line_start = False
        start_line = line
        m = re.compile(r"[A-Za-z_][A-Za-z_0-9]*").match(src, i)
        if m:
            word = m.group(0)
            j = m.end()
            if j < n and src[j] == '"' and word in STRING_PREFIXES:
                i, data, line = _lex_string(src, j, word, line)
                toks.append(Tok("str", data, start_line))
                continue
            if j < n and src[j] == "'" and word in ("u8", "u", "U", "L"):
                i, val = _lex_char(src, j, line)
                toks.append(Tok("chr", val, start_line))
                continue
            toks.append(Tok("id", word, start_line))
            i = j
            continue
        if c == '"':
            i, data, line = _lex_string(src, i, "", line)
            toks.append(Tok("str", data, start_line))
            continue
        if c == "'":
            i, val = _lex_char(src, i, line)
            toks.append(Tok("chr", val, start_line))
            continue
        m = re.compile(r"(\.?[0-9])([0-9A-Za-z_.']|[eEpP][+-])*").match(src, i)
        if m:
            toks.append(Tok("num", m.group(0), start_line))
            i = m.end()
            continue
        for p in PUNCT:
            if src.startswith(p, i):
                toks.append(Tok("op", p, start_line))
                i += len(p)
                break
        else:
            toks.append(Tok("op", c, start_line))
            i += 1
    return toks


def _lex_string(src, i, prefix, line):
    """i points at the opening quote. Returns (end index, bytes, new line)."""
    if prefix.endswith("R"):
        j = src.find("(", i + 1)
        delim = src[i + 1:j]
        if j < 0 or len(delim) > 16 or any(ch in delim for ch in ' ()\\\t\v\f\n'):
            raise CxxError("line %d: bad raw string delimiter" % line)
        end_marker = ")" + delim + '"'
        k = src.find(end_marker, j + 1)
        if k < 0:
            raise CxxError("line %d: unterminated raw string" % line)
        body = src[j + 1:k]
        return k + len(end_marker), body.encode("utf-8"), line + body.count("\n")
    j = i + 1
    n = len(src)
    while j < n:
        ch = src[j]
        if ch == "\\":
            if src.startswith("\\\n", j):
                line += 1
            j += 2
            continue
        if ch == '"':
            break
        if ch == "\n":
            raise CxxError("line %d: newline in string literal" % line)
        j += 1
    body = src[i + 1:j].replace("\\\n", "")
    return j + 1, _decode_escapes(body, line), line


def _lex_char(src, i, line):
    j = i + 1
    while src[j] != "'":
        j += 2 if src[j] == "\\" else 1
    data = _decode_escapes(src[i + 1:j], line)
    return j + 1, int.from_bytes(data, "big") if data else 0


# ---------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------


class Opaque:
    """A value the interpreter does not model (e.g. a bool parameter)."""

    def __init__(self, what):
        self.what = what

    def __repr__(self):
        return "Opaque(%s)" % self.what


class Broken:
    """A variable whose initialization could not be interpreted."""

    def __init__(self, name, reason):
        self.name = name
        self.reason = reason


class Enum:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


class Init:
    """A braced initializer list, converted by the context that consumes it."""

    def __init__(self, items, line):
        self.items = items
        self.line = line


class Msg:
    def __init__(self):
        self.role = ""
        self.content = ""
        self.content_parts = []  # [(type, text)]
        self.tool_calls = []  # [(name, arguments, id)]
        self.reasoning_content = ""
        self.tool_name = ""
        self.tool_call_id = ""
        self.var = None
        self.line = None

    def fields(self):
        return (self.role, self.content, tuple(self.content_parts), tuple(self.tool_calls),
                self.reasoning_content, self.tool_name, self.tool_call_id)


class Tool:
    def __init__(self, name, description, parameters):
        self.name = name
        self.description = description
        self.parameters = parameters
        self.var = None
        self.line = None

    def fields(self):
        return (self.name, self.description, self.parameters)


class Tester:
    def __init__(self, path):
        self.path = path


class Templates:
    def __init__(self, path):
        self.path = path


class FileText:
    def __init__(self, path):
        self.path = path


class Inputs:
    FIELDS = ("messages", "tools", "tool_choice", "parallel_tool_calls", "reasoning_format",
              "enable_thinking", "add_generation_prompt", "continue_final_message", "json_schema")

    def __init__(self):
        self.set = {}


class Params:
    def __init__(self, templates, inputs):
        self.templates = templates
        self.inputs = inputs


class Builder:
    def __init__(self, tester, inp, line):
        self.template_path = tester.path
        self.input = inp
        self.line = line
        self.params = {}
        self.is_partial = False
        self.expect_reconstruction = False
        self.expect = Msg()


ENUMS = {
    "COMMON_REASONING_FORMAT_NONE": ("reasoning_format", "none"),
    "COMMON_REASONING_FORMAT_AUTO": ("reasoning_format", "auto"),
    "COMMON_REASONING_FORMAT_DEEPSEEK": ("reasoning_format", "deepseek"),
    "COMMON_REASONING_FORMAT_DEEPSEEK_LEGACY": ("reasoning_format", "deepseek-legacy"),
    "COMMON_CHAT_TOOL_CHOICE_AUTO": ("tool_choice", "auto"),
    "COMMON_CHAT_TOOL_CHOICE_REQUIRED": ("tool_choice", "required"),
    "COMMON_CHAT_TOOL_CHOICE_NONE": ("tool_choice", "none"),
    "COMMON_CHAT_CONTINUATION_NONE": ("continue_final_message", "none"),
    "COMMON_CHAT_CONTINUATION_AUTO": ("continue_final_message", "auto"),
    "COMMON_CHAT_CONTINUATION_REASONING": ("continue_final_message", "reasoning_content"),
    "COMMON_CHAT_CONTINUATION_CONTENT": ("continue_final_message", "content"),
}


def enum_value(v, kind):
    if not isinstance(v, Enum) or v.name not in ENUMS or ENUMS[v.name][0] != kind:
        raise CxxError("expected a %s enum constant, got %r" % (kind, v))
    return ENUMS[v.name][1]


# conversions -----------------------------------------------------------------


def to_str(v):
    if isinstance(v, str):
        return v
    if isinstance(v, Init) and not v.items:
        return ""
    if isinstance(v, Broken):
        raise CxxError("uses %s, which could not be interpreted (%s)" % (v.name, v.reason))
    raise CxxError("expected a string, got %r" % (v,))


def to_bool(v):
    if isinstance(v, bool):
        return v
    raise CxxError("expected a bool literal, got %r" % (v,))


def check_value(v):
    if isinstance(v, Broken):
        raise CxxError("uses %s, which could not be interpreted (%s)" % (v.name, v.reason))
    return v


def to_tool(v):
    check_value(v)
    if isinstance(v, Tool):
        return v
    if isinstance(v, Init) and len(v.items) == 3:
        t = Tool(*[to_str(x) for x in v.items])
        t.line = v.line
        return t
    raise CxxError("expected a common_chat_tool, got %r" % (v,))


def to_tool_call(v):
    check_value(v)
    if isinstance(v, Init) and 1 <= len(v.items) <= 3:
        items = [to_str(x) for x in v.items] + [""] * (3 - len(v.items))
        return tuple(items)
    raise CxxError("expected a common_chat_tool_call, got %r" % (v,))


def to_msg(v):
    check_value(v)
    if isinstance(v, Msg):
        return v
    if isinstance(v, Init):
        return construct_msg(v.items, v.line)
    raise CxxError("expected a common_chat_msg, got %r" % (v,))


def to_list(v, conv):
    check_value(v)
    if isinstance(v, Init):
        return [conv(x) for x in v.items]
    if isinstance(v, list):
        return [conv(x) for x in v]
    raise CxxError("expected a braced list, got %r" % (v,))


def construct_msg(items, line):
    m = Msg()
    names = ["role", "content", "content_parts", "tool_calls", "reasoning_content", "tool_name",
             "tool_call_id"]
    if len(items) > len(names):
        raise CxxError("too many initializers for common_chat_msg")
    for name, v in zip(names, items):
        if name == "content_parts":
            parts = to_list(v, lambda p: tuple(to_str(x) for x in p.items)
                            if isinstance(p, Init) and len(p.items) == 2 else _bad("content part"))
            m.content_parts = parts
        elif name == "tool_calls":
            m.tool_calls = to_list(v, to_tool_call)
        else:
            setattr(m, name, to_str(v))
    m.line = line
    return m


def _bad(what):
    raise CxxError("bad %s initializer" % what)


# ---------------------------------------------------------------------------
# Hand-ported helpers (used only while their C++ source is unchanged)
# ---------------------------------------------------------------------------


def h_simple_assist_msg(content, reasoning_content="", tool_name="", arguments="", id=""):
    m = Msg()
    m.role = "assistant"
    m.content = content
    m.reasoning_content = reasoning_content
    if tool_name or id:
        m.tool_calls.append((tool_name, arguments, id))
    return m


def h_message_with_tool_calls(tool_name, arguments):
    return h_simple_assist_msg("", "", tool_name, arguments)


def h_message_with_tool_calls_and_reasoning(tool_name, arguments, reasoning):
    return h_simple_assist_msg("", reasoning, tool_name, arguments)


def h_message_with_reasoning_content_and_multiple_tool_calls(reasoning, content, tool_calls):
    m = Msg()
    m.role = "assistant"
    m.content = content
    m.reasoning_content = reasoning
    for name, args in tool_calls:
        m.tool_calls.append((name, args, ""))
    return m


def h_message_with_content_and_tool_call(content, tool_name, arguments):
    return h_simple_assist_msg(content, "", tool_name, arguments)


def h_message_with_reasoning_and_tool_call(reasoning, tool_name, arguments):
    return h_simple_assist_msg("", reasoning, tool_name, arguments)


def _pairs(v):
    return to_list(v, lambda p: tuple(to_str(x) for x in p.items)
                   if isinstance(p, Init) and len(p.items) == 2 else _bad("name/arguments pair"))


# name -> (python function, argument converters, fingerprint of the C++ definition)
HELPERS = {
    "simple_assist_msg": (h_simple_assist_msg, [to_str] * 5, "67986d27bbda"),
    "message_with_tool_calls": (h_message_with_tool_calls, [to_str] * 2, "5100357d6a39"),
    "message_with_tool_calls_and_reasoning": (
        h_message_with_tool_calls_and_reasoning, [to_str] * 3, "87cc63e7ec65"),
    "message_with_reasoning_content_and_multiple_tool_calls": (
        h_message_with_reasoning_content_and_multiple_tool_calls, [to_str, to_str, _pairs],
        "56ed0fe8bbf3"),
    "message_with_content_and_tool_call": (
        h_message_with_content_and_tool_call, [to_str] * 3, "21a38a6ae1be"),
    "message_with_reasoning_and_tool_call": (
        h_message_with_reasoning_and_tool_call, [to_str] * 3, "11d8f9668682"),
}


def fingerprint(tokens):
    text = " ".join("%s:%r" % (t.kind, t.val) for t in tokens)
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


# ---------------------------------------------------------------------------
# Top-level scan
# ---------------------------------------------------------------------------


def match_close(toks, i):
    """toks[i] is an opening bracket; return the index of its partner."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    opener = toks[i].val
    closer = pairs[opener]
    depth = 0
    for j in range(i, len(toks)):
        t = toks[j]
        if t.kind != "op":
            continue
        if t.val == opener:
            depth += 1
        elif t.val == closer:
            depth -= 1
            if depth == 0:
                return j
    raise CxxError("line %d: unbalanced %s" % (toks[i].line, opener))


class FuncDef:
    def __init__(self, name, params, body, line, all_tokens):
        self.name = name
        self.params = params
        self.body = body
        self.line = line
        self.all_tokens = all_tokens


def param_names(toks):
    """Names of the parameters in a parameter-list token slice (without parens)."""
    names = []
    cur = []
    depth = 0
    for t in toks + [Tok("op", ",", 0)]:
        if t.kind == "op" and t.val in "(<[{":
            depth += 1
        elif t.kind == "op" and t.val in ")>]}":
            depth -= 1
        if depth == 0 and t.is_op(","):
            # drop a default value
            for k, x in enumerate(cur):
                if x.is_op("="):
                    cur = cur[:k]
                    break
            ids = [x for x in cur if x.kind == "id"]
            if ids:
                names.append(ids[-1].val)
            cur = []
        else:
            cur.append(t)
    return names


def scan_top_level(toks):
    funcs = OrderedDict()
    decls = []  # token slices of top-level statements (declarations)
    i = 0
    n = len(toks)
    while i < n:
        start = i
        j = i
        kind = None
        while j < n:
            t = toks[j]
            if t.kind == "op" and t.val in "([":
                j = match_close(toks, j) + 1
                continue
            if t.is_op(";"):
                kind = "stmt"
                break
            if t.is_op("{"):
                kind = "brace"
                break
            j += 1
        if kind is None:
            break
        head = toks[start:j]
        if kind == "stmt":
            decls.append(head)
            i = j + 1
            continue
        close = match_close(toks, j)
        first = head[0].val if head else ""
        if first in ("struct", "class", "enum", "union", "namespace") or (
                first == "template" and any(t.is_id("class") or t.is_id("struct") for t in head[1:3])
                and not any(t.is_op("(") for t in head)):
            i = close + 1
            if i < n and toks[i].is_op(";"):
                i += 1
            continue
        eq = next((k for k, t in enumerate(head) if t.is_op("=")), None)
        paren = next((k for k, t in enumerate(head) if t.is_op("(")), None)
        if paren is not None and (eq is None or paren < eq):
            # function definition
            name_tok = head[paren - 1] if paren > 0 else None
            qualified = paren >= 2 and head[paren - 2].is_op("::")
            pclose = match_close(head, paren)
            if name_tok is not None and name_tok.kind == "id" and not qualified:
                funcs[name_tok.val] = FuncDef(name_tok.val, param_names(head[paren + 1:pclose]),
                                              toks[j + 1:close], name_tok.line, toks[start:close + 1])
            i = close + 1
            continue
        # braced initializer of a declaration: continue to the ';'
        k = close + 1
        while k < n and not toks[k].is_op(";"):
            if toks[k].kind == "op" and toks[k].val in "([{":
                k = match_close(toks, k)
            k += 1
        decls.append(toks[start:k])
        i = k + 1
    return funcs, decls


# ---------------------------------------------------------------------------
# Interpreter
# ---------------------------------------------------------------------------


class Env:
    def __init__(self, parent=None):
        self.vars = {}
        self.parent = parent

    def lookup(self, name):
        e = self
        while e is not None:
            if name in e.vars:
                return e.vars[name]
            e = e.parent
        raise CxxError("unknown identifier %s" % name)

    def has(self, name):
        e = self
        while e is not None:
            if name in e.vars:
                return True
            e = e.parent
        return False

    def define(self, name, value):
        self.vars[name] = value


TYPE_QUALIFIERS = {"static", "const", "constexpr", "inline", "volatile", "thread_local", "extern",
                   "mutable"}
STATEMENT_KEYWORDS = {"return", "if", "for", "while", "do", "switch", "try", "throw", "break",
                      "continue", "goto", "case", "default", "else", "catch", "delete", "new"}


class Interpreter:
    def __init__(self, funcs):
        self.funcs = funcs
        self.globals = Env()
        self.cases = []
        self.skipped = []
        self.conditions = []  # stack of condition texts of enclosing if statements
        self.helper_ok = {}
        for name, (_, _, fp) in HELPERS.items():
            f = funcs.get(name)
            self.helper_ok[name] = f is not None and fingerprint(f.all_tokens) == fp
        self.call_depth = 0

    # -- statements --------------------------------------------------------

    def run_function(self, name, args, line):
        f = self.funcs[name]
        if len(args) > len(f.params):
            raise CxxError("too many arguments to %s" % name)
        env = Env(self.globals)
        for pname, v in zip(f.params, args + [Opaque("default")] * (len(f.params) - len(args))):
            env.define(pname, v)
        self.call_depth += 1
        if self.call_depth > 20:
            raise CxxError("recursion too deep")
        try:
            self.exec_block(f.body, env)
        finally:
            self.call_depth -= 1

    def split_statements(self, toks):
        """Yield (kind, parts) for the statements of a block body."""
        i = 0
        n = len(toks)
        out = []
        while i < n:
            t = toks[i]
            if t.is_op(";"):
                i += 1
                continue
            if t.is_op("{"):
                c = match_close(toks, i)
                out.append(("block", toks[i + 1:c], t.line))
                i = c + 1
                continue
            if t.is_id("for") or t.is_id("while") or t.is_id("switch"):
                pc = match_close(toks, i + 1)
                body_end = self.statement_end(toks, pc + 1)
                out.append((t.val, (toks[i + 2:pc], toks[pc + 1:body_end]), t.line))
                i = body_end
                continue
            if t.is_id("if"):
                k = i + 1
                if toks[k].is_id("constexpr"):
                    k += 1
                pc = match_close(toks, k)
                body_end = self.statement_end(toks, pc + 1)
                else_part = None
                end = body_end
                if end < n and toks[end].is_id("else"):
                    else_end = self.statement_end(toks, end + 1)
                    else_part = toks[end + 1:else_end]
                    end = else_end
                out.append(("if", (toks[k + 1:pc], toks[pc + 1:body_end], else_part), t.line))
                i = end
                continue
            if t.is_id("try"):
                c = match_close(toks, i + 1)
                body = toks[i + 2:c]
                catches = []
                k = c + 1
                while k < n and toks[k].is_id("catch"):
                    pc = match_close(toks, k + 1)
                    bc = match_close(toks, pc + 1)
                    catches.append((toks[k + 2:pc], toks[pc + 2:bc]))
                    k = bc + 1
                out.append(("try", (body, catches), t.line))
                i = k
                continue
            if t.is_id("do"):
                body_end = self.statement_end(toks, i + 1)
                k = body_end
                # while ( ... ) ;
                pc = match_close(toks, k + 1)
                out.append(("do", toks[i + 1:body_end], t.line))
                i = pc + 2
                continue
            j = i
            while j < n and not toks[j].is_op(";"):
                if toks[j].kind == "op" and toks[j].val in "([{":
                    j = match_close(toks, j)
                j += 1
            out.append(("simple", toks[i:j], t.line))
            i = j + 1
        return out

    def statement_end(self, toks, i):
        """Index just past the statement starting at i."""
        t = toks[i]
        if t.is_op("{"):
            return match_close(toks, i) + 1
        if t.is_id("if"):
            k = i + 1
            if toks[k].is_id("constexpr"):
                k += 1
            pc = match_close(toks, k)
            end = self.statement_end(toks, pc + 1)
            if end < len(toks) and toks[end].is_id("else"):
                end = self.statement_end(toks, end + 1)
            return end
        if t.is_id("for") or t.is_id("while") or t.is_id("switch"):
            pc = match_close(toks, i + 1)
            return self.statement_end(toks, pc + 1)
        if t.is_id("try"):
            c = match_close(toks, i + 1)
            k = c + 1
            while k < len(toks) and toks[k].is_id("catch"):
                pc = match_close(toks, k + 1)
                k = match_close(toks, pc + 1) + 1
            return k
        j = i
        while j < len(toks) and not toks[j].is_op(";"):
            if toks[j].kind == "op" and toks[j].val in "([{":
                j = match_close(toks, j)
            j += 1
        return j + 1

    def exec_block(self, toks, env):
        scope = Env(env)
        pending = []  # direct parses awaiting an assertion on their outcome
        flags = {}  # flag variable -> exception type caught when it is set
        for kind, parts, line in self.split_statements(toks):
            self.exec_statement(kind, parts, line, scope, pending, flags)
        for p in pending:
            self.skipped.append({"template": p["template"], "line": p["line"],
                                 "reason": "direct parse whose outcome is not asserted"})

    def exec_statement(self, kind, parts, line, env, pending, flags):
        if kind == "block":
            self.exec_block(parts, env)
        elif kind == "for":
            self.exec_for(parts, line, env)
        elif kind == "if":
            cond, body, else_part = parts
            text = self.source_text(cond)
            try:
                value = self.eval_tokens(cond, env)
            except (CxxError, RecursionError, ValueError, TypeError, IndexError):
                value = None
            if isinstance(value, bool):
                # globals hold their initial values, i.e. those of a run without arguments
                taken, not_taken = (body, else_part) if value else (else_part, body)
                if not_taken and self.contains_test(not_taken):
                    shown = text if not_taken is body else "!(%s)" % text
                    self.skip_all_tests(not_taken, env, "not part of the default test run: it runs only "
                                        "when %s, which is false without command-line arguments" % shown)
                if taken:
                    self.exec_block(taken, env)
                return
            self.conditions.append(text)
            try:
                self.exec_block(body, env)
            finally:
                self.conditions.pop()
            if else_part:
                self.conditions.append("!(" + self.source_text(cond) + ")")
                try:
                    self.exec_block(else_part, env)
                finally:
                    self.conditions.pop()
        elif kind == "try":
            body, catches = parts
            inner = []
            scope = Env(env)
            for k2, p2, l2 in self.split_statements(body):
                self.exec_statement(k2, p2, l2, scope, inner, flags)
            for ctype, cbody in catches:
                ids = [t.val for t in ctype if t.kind == "id" and t.val != "const"]
                exc = "::".join(ids[:-1]) if len(ids) > 1 else "..."
                for k2, p2, _ in self.split_statements(cbody):
                    if k2 == "simple" and len(p2) == 3 and p2[0].kind == "id" and p2[1].is_op("=") \
                            and p2[2].is_id("true"):
                        flags[p2[0].val] = exc
            for p in inner:
                p["in_try"] = True
            pending.extend(inner)
        elif kind in ("while", "switch", "do"):
            body = parts[1] if kind != "do" else parts
            if self.contains_test(body):
                self.skip_all_tests(body, env, "test inside a %s loop" % kind)
        else:
            self.exec_simple(parts, line, env, pending, flags)

    def exec_for(self, parts, line, env):
        header, body = parts
        colon = None
        depth = 0
        for k, t in enumerate(header):
            if t.kind == "op" and t.val in "([{":
                depth += 1
            elif t.kind == "op" and t.val in ")]}":
                depth -= 1
            elif depth == 0 and t.is_op(":"):
                colon = k
                break
        if colon is None:
            if self.contains_test(body):
                self.skip_all_tests(body, env, "test inside a counted for loop")
            return
        decl = header[:colon]
        names = [t.val for t in decl if t.kind == "id"]
        var = names[-1]
        try:
            seq = self.eval_tokens(header[colon + 1:], env)
            items = seq.items if isinstance(seq, Init) else list(seq)
        except (CxxError, TypeError) as e:
            if self.contains_test(body):
                self.skip_all_tests(body, env, "loop range not understood: %s" % e)
            return
        for item in items:
            scope = Env(env)
            scope.define(var, item)
            self.exec_block(body, scope)

    def contains_test(self, toks):
        for k, t in enumerate(toks):
            if t.is_id("run") and k > 0 and toks[k - 1].is_op("."):
                return True
            if t.is_id("common_chat_peg_parse"):
                return True
            if t.kind == "id" and t.val in self.funcs and self.function_has_tests(t.val):
                return True
        return False

    def function_has_tests(self, name, seen=None):
        seen = seen or set()
        if name in seen:
            return False
        seen.add(name)
        f = self.funcs[name]
        for k, t in enumerate(f.body):
            if t.is_id("peg_tester") or t.is_id("common_chat_peg_parse"):
                return True
            if t.kind == "id" and t.val in self.funcs and t.val != name and \
                    k + 1 < len(f.body) and f.body[k + 1].is_op("(") and \
                    self.function_has_tests(t.val, seen):
                return True
        return False

    def skip_all_tests(self, toks, env, reason):
        template = None
        for t in toks:
            if t.kind == "str" and t.val.endswith(b".jinja"):
                template = os.path.basename(t.val.decode("utf-8"))
                break
        for k, t in enumerate(toks):
            if (t.is_id("test") and k > 0 and toks[k - 1].is_op(".") and k + 1 < len(toks)
                    and toks[k + 1].is_op("(")) or t.is_id("common_chat_peg_parse"):
                tpl = self.statement_template(toks[k - 2:k + 1], env) if t.is_id("test") else None
                self.skipped.append({"template": tpl or template, "line": t.line, "reason": reason})

    def source_text(self, toks):
        """The C++ text of a token slice (comments dropped, spacing normalized)."""
        out = ""
        prev = None
        for t in toks:
            if t.kind == "str":
                text = json.dumps(t.val.decode("utf-8", "replace"), ensure_ascii=False)
            elif t.kind == "chr":
                text = repr(chr(t.val))
            else:
                text = str(t.val)
            glue = prev is None or (t.kind == "op" and t.val in ("(", ")", ",", ".", "->", "::", "[", "]")) \
                or (prev.kind == "op" and prev.val in ("(", ".", "->", "::", "!", "["))
            out += text if glue else " " + text
            prev = t
        return out

    def exec_simple(self, toks, line, env, pending, flags):
        if not toks:
            return
        has_test = self.contains_test(toks)
        test_line = None
        for k, t in enumerate(toks):
            if t.is_id("test") and k > 0 and toks[k - 1].is_op(".") and k + 1 < len(toks) \
                    and toks[k + 1].is_op("("):
                test_line = t.line
                break
        self.cur_pending = pending
        self.cur_flags = flags
        try:
            decl = self.parse_declaration(toks)
            if decl is not None:
                self.exec_declaration(decl, env)
                return
            first = toks[0]
            if first.is_id("GGML_ASSERT") or first.is_id("assert"):
                self.exec_assert(toks, pending, flags)
                return
            if first.kind == "id" and first.val in STATEMENT_KEYWORDS:
                return
            # assignment?
            eq = None
            depth = 0
            for k, t in enumerate(toks):
                if t.kind == "op" and t.val in "([{":
                    depth += 1
                elif t.kind == "op" and t.val in ")]}":
                    depth -= 1
                elif depth == 0 and t.is_op("="):
                    eq = k
                    break
            if eq is not None:
                self.exec_assignment(toks[:eq], toks[eq + 1:], env)
                return
            self.eval_tokens(toks, env)
        except (CxxError, RecursionError, ValueError, TypeError, IndexError) as e:
            if has_test:
                self.skipped.append({"template": self.statement_template(toks, env),
                                     "line": test_line or line, "reason": str(e)})
            # anything else (statements unrelated to parse tests) is ignored

    def statement_template(self, toks, env):
        for k, t in enumerate(toks):
            if t.is_id("test") and k > 1 and toks[k - 1].is_op(".") and toks[k - 2].kind == "id":
                try:
                    v = env.lookup(toks[k - 2].val)
                except CxxError:
                    return None
                return os.path.basename(v.path) if isinstance(v, Tester) else None
        return None

    # declarations ----------------------------------------------------------

    def parse_declaration(self, toks):
        """Return (type, name, init_kind, init_tokens, line) or None."""
        i = 0
        n = len(toks)
        while i < n and toks[i].kind == "id" and toks[i].val in TYPE_QUALIFIERS:
            i += 1
        if i >= n or toks[i].kind != "id" or toks[i].val in STATEMENT_KEYWORDS:
            return None
        tstart = i
        i += 1
        while i + 1 < n and toks[i].is_op("::") and toks[i + 1].kind == "id":
            i += 2
        if i < n and toks[i].is_op("<"):
            depth = 0
            while i < n:
                if toks[i].is_op("<"):
                    depth += 1
                elif toks[i].is_op(">"):
                    depth -= 1
                    if depth == 0:
                        i += 1
                        break
                i += 1
        while i < n and (toks[i].is_op("*") or toks[i].is_op("&") or toks[i].is_op("&&")
                         or toks[i].is_id("const")):
            i += 1
        if i >= n or toks[i].kind != "id":
            return None
        type_toks = [t for t in toks[tstart:i] if not t.is_id("const")]
        type_name = "".join(str(t.val) for t in type_toks)
        name = toks[i].val
        line = toks[i].line
        i += 1
        if i == n:
            return (type_name, name, "default", [], line)
        if toks[i].is_op("="):
            return (type_name, name, "=", toks[i + 1:], line)
        if toks[i].is_op("{") and match_close(toks, i) == n - 1:
            return (type_name, name, "{}", toks[i:], line)
        if toks[i].is_op("(") and match_close(toks, i) == n - 1:
            return (type_name, name, "()", toks[i + 1:n - 1], line)
        return None

    def exec_declaration(self, decl, env):
        type_name, name, init_kind, init, line = decl
        try:
            if init_kind == "=":
                v = self.eval_tokens(init, env)
                v = self.convert_to_type(type_name, v)
            elif init_kind == "{}":
                v = self.construct(type_name, self.eval_tokens(init, env), line)
            elif init_kind == "()":
                args = self.eval_args(init, env)
                v = self.construct_paren(type_name, args, line)
            else:
                v = self.default_value(type_name)
        except (CxxError, ValueError, TypeError, IndexError) as e:
            env.define(name, Broken(name, str(e)))
            raise
        if isinstance(v, (Msg, Tool)):
            v = copy.deepcopy(v)
            v.var = name
            v.line = line
        env.define(name, v)

    def default_value(self, type_name):
        if type_name == "common_chat_msg":
            return Msg()
        if type_name in ("std::string", "string"):
            return ""
        if type_name == "common_chat_templates_inputs":
            return Inputs()
        if type_name == "bool":
            return False
        return Opaque(type_name)

    def convert_to_type(self, type_name, v):
        check_value(v)
        if type_name == "common_chat_msg":
            return copy.deepcopy(to_msg(v))
        if type_name == "common_chat_tool":
            return to_tool(v)
        if type_name in ("std::string", "string", "char*"):
            return to_str(v)
        if type_name == "std::vector<common_chat_tool>":
            return to_list(v, to_tool)
        if type_name == "std::vector<common_chat_msg>":
            return to_list(v, to_msg)
        return v

    def construct(self, type_name, init, line):
        if not isinstance(init, Init):
            raise CxxError("expected a braced initializer")
        if type_name == "common_chat_tool":
            t = to_tool(init)
            return t
        if type_name == "common_chat_msg":
            return construct_msg(init.items, line)
        if type_name == "std::vector<common_chat_tool>":
            return to_list(init, to_tool)
        if type_name == "std::vector<common_chat_msg>":
            return to_list(init, to_msg)
        if type_name in ("std::string", "string"):
            return "".join(to_str(x) for x in init.items)
        return Opaque(type_name)

    def construct_paren(self, type_name, args, line):
        if type_name == "peg_tester":
            return Tester(to_str(args[0]))
        if type_name == "common_chat_parser_params" and len(args) == 1 and \
                isinstance(args[0], Params):
            return args[0]
        if type_name in ("std::string", "string") and len(args) == 1:
            return to_str(args[0])
        return Opaque(type_name)

    # assignments -----------------------------------------------------------

    def exec_assignment(self, lhs, rhs, env):
        path = [t.val for t in lhs if t.kind == "id"]
        if not path or len(lhs) != 2 * len(path) - 1 or any(
                not lhs[k].is_op(".") for k in range(1, len(lhs), 2)):
            raise CxxError("unsupported assignment target")
        value = self.eval_tokens(rhs, env)
        target = env.lookup(path[0])
        check_value(target)
        if len(path) == 1:
            # plain re-assignment
            e = env
            while e is not None and path[0] not in e.vars:
                e = e.parent
            e.vars[path[0]] = value
            return
        if len(path) != 2:
            raise CxxError("unsupported nested assignment")
        field = path[1]
        if isinstance(target, Msg):
            if field == "content_parts":
                target.content_parts = [tuple(to_str(x) for x in p.items) for p in value.items]
            elif field == "tool_calls":
                target.tool_calls = to_list(value, to_tool_call)
            elif field in ("role", "content", "reasoning_content", "tool_name", "tool_call_id"):
                setattr(target, field, to_str(value))
            else:
                raise CxxError("unknown common_chat_msg field %s" % field)
        elif isinstance(target, Inputs):
            if field == "messages":
                target.set[field] = to_list(value, to_msg)
            elif field == "tools":
                target.set[field] = to_list(value, to_tool)
            elif field in ("reasoning_format", "tool_choice", "continue_final_message"):
                target.set[field] = enum_value(value, field)
            elif field in ("enable_thinking", "parallel_tool_calls", "add_generation_prompt"):
                target.set[field] = to_bool(value)
            elif field == "json_schema":
                target.set[field] = to_str(value)
            elif field in ("use_jinja",):
                pass
            else:
                raise CxxError("unsupported inputs field %s" % field)
        else:
            raise CxxError("assignment to a field of an unmodelled value")

    def exec_assert(self, toks, pending, flags):
        # GGML_ASSERT(flag && "...") / assert(flag): the direct parse must have raised
        if len(toks) < 4 or not toks[1].is_op("("):
            return
        cond = toks[2:match_close(toks, 1)]
        if cond and cond[0].kind == "id" and cond[0].val in flags and (
                len(cond) == 1 or cond[1].is_op("&&")):
            exc = flags[cond[0].val]
            for p in list(pending):
                if p.get("in_try"):
                    p["case"]["expect_fail"] = True
                    p["case"]["note"] = "the parse must raise %s" % exc
                    self.cases.append(p["case"])
                    pending.remove(p)

    # -- expressions -------------------------------------------------------

    def eval_tokens(self, toks, env):
        p = ExprParser(toks, self, env)
        v = p.parse_expr()
        if p.i != len(toks):
            raise CxxError("line %d: unexpected %r" % (toks[p.i].line, toks[p.i].val))
        return v

    def eval_args(self, toks, env):
        p = ExprParser(toks, self, env)
        args = []
        if not toks:
            return args
        while True:
            args.append(p.parse_expr())
            if p.i == len(toks):
                break
            if not toks[p.i].is_op(","):
                raise CxxError("line %d: expected ','" % toks[p.i].line)
            p.i += 1
        return args

    def call_function(self, name, args, line, env):
        if name in HELPERS:
            fn, convs, _ = HELPERS[name]
            if not self.helper_ok[name]:
                raise CxxError("helper %s changed in the C++ source; review its port" % name)
            if len(args) > len(convs):
                raise CxxError("too many arguments to %s" % name)
            m = fn(*[c(a) for c, a in zip(convs, args)])
            m.line = line
            return m
        if name == "peg_tester":
            return Tester(to_str(args[0]))
        if name == "read_file":
            return FileText(to_str(args[0]))
        if name == "read_templates":
            return Templates(to_str(args[0]))
        if name == "common_chat_templates_init":
            if len(args) == 2 and isinstance(args[1], FileText):
                return Templates(args[1].path)
            raise CxxError("common_chat_templates_init of an unknown template")
        if name == "common_chat_templates_ptr":
            return args[0]
        if name == "common_chat_templates_apply":
            if isinstance(args[0], Templates) and isinstance(args[1], Inputs):
                return Params(args[0], copy.deepcopy(args[1]))
            raise CxxError("common_chat_templates_apply of unknown arguments")
        if name in ("std::string", "string"):
            return "" if not args else to_str(args[0])
        if name == "common_chat_peg_parse":
            return self.direct_parse(args, line)
        if name in self.funcs:
            if self.function_has_tests(name):
                self.run_function(name, args, line)
                return Opaque("void")
            raise CxxError("call to %s, which is not interpreted" % name)
        raise CxxError("unknown function %s" % name)

    def direct_parse(self, args, line):
        if len(args) != 4:
            raise CxxError("common_chat_peg_parse with %d arguments" % len(args))
        params = args[3]
        if not isinstance(params, Params):
            raise CxxError("common_chat_peg_parse with unknown parser parameters")
        inp = to_str(args[1])
        case = new_case(params.templates.path, line, inp, self.conditions)
        for field, value in params.inputs.set.items():
            case["params"][field] = value
        case["is_partial"] = to_bool(args[2])
        case["expect"] = None
        self.cur_pending.append({"template": os.path.basename(params.templates.path),
                                 "line": line, "case": case})
        return Opaque("parse result")

    def call_method(self, obj, name, args, line):
        check_value(obj)
        if isinstance(obj, Tester):
            if name == "test":
                if len(args) != 1:
                    raise CxxError("test() takes one argument")
                return Builder(obj, to_str(args[0]), line)
            if name == "template_path":
                return obj.path
            raise CxxError("unknown peg_tester method %s" % name)
        if isinstance(obj, Builder):
            return self.builder_method(obj, name, args, line)
        if isinstance(obj, (Templates, Params)) and name == "get":
            return obj
        if isinstance(obj, str):
            if name == "c_str":
                return obj
            if name == "empty":
                return obj == ""
        raise CxxError("unknown method %s on %r" % (name, obj))

    def builder_method(self, b, name, args, line):
        def one():
            if len(args) != 1:
                raise CxxError("%s() takes one argument" % name)
            return args[0]

        if name == "reasoning_format":
            b.params["reasoning_format"] = enum_value(one(), "reasoning_format")
        elif name == "tool_choice":
            b.params["tool_choice"] = enum_value(one(), "tool_choice")
        elif name == "continue_final_message":
            b.params["continue_final_message"] = enum_value(one(), "continue_final_message")
        elif name == "tools":
            b.params["tools"] = to_list(one(), to_tool)
        elif name == "messages":
            b.params["messages"] = to_list(one(), to_msg)
        elif name in ("enable_thinking", "parallel_tool_calls", "add_generation_prompt"):
            b.params[name] = to_bool(one())
        elif name == "json_schema":
            b.params["json_schema"] = to_str(one())
        elif name == "is_partial":
            b.is_partial = to_bool(one())
        elif name == "expect_reconstruction":
            b.expect_reconstruction = True if not args else to_bool(one())
        elif name == "expect":
            b.expect = copy.deepcopy(to_msg(one()))
        elif name == "expect_content":
            b.expect.content = to_str(one())
        elif name == "expect_reasoning":
            b.expect.reasoning_content = to_str(one())
        elif name == "expect_tool_calls":
            b.expect.tool_calls = to_list(one(), to_tool_call)
        elif name == "run":
            if args:
                raise CxxError("run() takes no arguments")
            case = new_case(b.template_path, b.line, b.input, self.conditions)
            case["params"] = dict(b.params)
            case["is_partial"] = b.is_partial
            case["expect_reconstruction"] = b.expect_reconstruction
            case["expect"] = b.expect
            self.cases.append(case)
            return Opaque("void")
        else:
            raise CxxError("unknown peg_test_builder method %s" % name)
        return b


def new_case(path, line, inp, conditions):
    return {"template": os.path.basename(path), "line": line, "input": inp, "params": {},
            "is_partial": False, "expect_reconstruction": False, "expect": None,
            "expect_fail": False, "conditions": list(conditions)}


class ExprParser:
    """Pratt parser + evaluator for the expression subset used by the tests."""

    BINARY = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 4, ">": 4, "<=": 4, ">=": 4, "+": 5,
              "-": 5, "*": 6, "/": 6, "%": 6}

    def __init__(self, toks, interp, env):
        self.toks = toks
        self.i = 0
        self.interp = interp
        self.env = env

    def peek(self, k=0):
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else None

    def expect_op(self, v):
        t = self.peek()
        if t is None or not t.is_op(v):
            raise CxxError("expected %r at line %s" % (v, t.line if t else "end"))
        self.i += 1
        return t

    def parse_expr(self, min_prec=1):
        left = self.parse_unary()
        while True:
            t = self.peek()
            if t is None or t.kind != "op" or t.val not in self.BINARY:
                break
            prec = self.BINARY[t.val]
            if prec < min_prec:
                break
            self.i += 1
            if (t.val == "&&" and left is False) or (t.val == "||" and left is True):
                self.skip_operand(prec)  # short-circuit: the right side is not evaluated
                continue
            right = self.parse_expr(prec + 1)
            left = self.binary(t.val, left, right, t.line)
        return left

    def skip_operand(self, prec):
        while self.i < len(self.toks):
            t = self.toks[self.i]
            if t.kind == "op" and t.val in "([{":
                self.i = match_close(self.toks, self.i) + 1
                continue
            if t.kind == "op" and (t.val == "," or (t.val in self.BINARY and self.BINARY[t.val] <= prec)):
                return
            self.i += 1

    def binary(self, op, a, b, line):
        check_value(a)
        check_value(b)
        if op == "+":
            if isinstance(a, str) and isinstance(b, str):
                return a + b
            if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):
                return a + b
            raise CxxError("line %d: unsupported operands for +" % line)
        if op in ("==", "!="):
            if type(a) in (str, int, bool) and type(b) in (str, int, bool):
                return (a == b) == (op == "==")
        if op in ("&&", "||") and isinstance(a, bool) and isinstance(b, bool):
            return (a and b) if op == "&&" else (a or b)
        raise CxxError("line %d: unsupported operator %s" % (line, op))

    def parse_unary(self):
        t = self.peek()
        if t is None:
            raise CxxError("unexpected end of expression")
        if t.is_op("!"):
            self.i += 1
            v = check_value(self.parse_unary())
            if isinstance(v, bool):
                return not v
            raise CxxError("line %d: ! of a non-bool" % t.line)
        if t.is_op("-"):
            self.i += 1
            v = check_value(self.parse_unary())
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return -v
            raise CxxError("line %d: unary - of a non-number" % t.line)
        if t.is_op("&") or t.is_op("*"):
            self.i += 1
            return self.parse_unary()
        return self.parse_postfix(self.parse_primary())

    def parse_primary(self):
        t = self.peek()
        if t.kind == "str":
            data = b""
            while self.peek() is not None and self.peek().kind == "str":
                data += self.peek().val
                self.i += 1
            try:
                return data.decode("utf-8")
            except UnicodeDecodeError:
                raise CxxError("line %d: string literal is not valid UTF-8" % t.line) from None
        if t.kind == "num":
            self.i += 1
            text = t.val.replace("'", "")
            m = re.fullmatch(r"(0[xX][0-9a-fA-F]+|[0-9]+)([uUlL]*)", text)
            if m:
                return int(m.group(1), 0)
            return float(text.rstrip("fFlL"))
        if t.kind == "chr":
            self.i += 1
            return t.val
        if t.is_op("("):
            self.i += 1
            v = self.parse_expr()
            self.expect_op(")")
            return v
        if t.is_op("{"):
            return self.parse_init()
        if t.is_op("["):
            raise CxxError("line %d: lambda expressions are not interpreted" % t.line)
        if t.kind == "id":
            self.i += 1
            name = t.val
            while self.peek() is not None and self.peek().is_op("::") and \
                    self.peek(1) is not None and self.peek(1).kind == "id":
                name += "::" + self.peek(1).val
                self.i += 2
            if name == "true":
                return True
            if name == "false":
                return False
            if name in ("nullptr", "NULL"):
                return None
            nxt = self.peek()
            if nxt is not None and nxt.is_op("("):
                close = match_close(self.toks, self.i)
                args = self.interp.eval_args(self.toks[self.i + 1:close], self.env)
                self.i = close + 1
                return self.interp.call_function(name, args, t.line, self.env)
            if nxt is not None and nxt.is_op("{") and not self.env.has(name):
                init = self.parse_init()
                return self.interp.construct(name, init, t.line)
            if name in ENUMS:
                return Enum(name)
            return self.env.lookup(name)
        raise CxxError("line %d: unexpected %r" % (t.line, t.val))

    def parse_init(self):
        open_tok = self.expect_op("{")
        close = match_close(self.toks, self.i - 1)
        inner = self.toks[self.i:close]
        items = []
        if inner:
            p = ExprParser(inner, self.interp, self.env)
            while p.i < len(inner):
                items.append(p.parse_expr())
                if p.i < len(inner):
                    if not inner[p.i].is_op(","):
                        raise CxxError("line %d: expected ',' in initializer" % inner[p.i].line)
                    p.i += 1
        self.i = close + 1
        return Init(items, open_tok.line)

    def parse_postfix(self, v):
        while True:
            t = self.peek()
            if t is None:
                return v
            if t.is_op(".") or t.is_op("->"):
                name_tok = self.peek(1)
                if name_tok is None or name_tok.kind != "id":
                    raise CxxError("line %d: bad member access" % t.line)
                self.i += 2
                if self.peek() is not None and self.peek().is_op("("):
                    close = match_close(self.toks, self.i)
                    args = self.interp.eval_args(self.toks[self.i + 1:close], self.env)
                    self.i = close + 1
                    v = self.interp.call_method(v, name_tok.val, args, name_tok.line)
                else:
                    v = self.member(v, name_tok.val, name_tok.line)
                continue
            return v

    def member(self, v, name, line):
        check_value(v)
        if isinstance(v, Msg) and name in ("role", "content", "reasoning_content", "tool_name",
                                            "tool_call_id"):
            return getattr(v, name)
        if isinstance(v, Params) and name == "parser":
            return v
        raise CxxError("line %d: unsupported member %s" % (line, name))


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------


def parse_json_or_none(s):
    try:
        return json.loads(s)
    except ValueError:
        return None


class Registry:
    """Assigns keys to the tools and messages the cases refer to."""

    def __init__(self):
        self.tools = OrderedDict()
        self.messages = OrderedDict()
        self._tool_keys = {}
        self._msg_keys = {}

    def _key(self, table, keys, obj, anon_prefix):
        ident = (obj.var, obj.line, obj.fields())
        if ident in keys:
            return keys[ident]
        if obj.var is not None:
            key = obj.var
            if key in table:
                key = "%s@L%d" % (obj.var, obj.line)
        else:
            key = "%s_L%d" % (anon_prefix, obj.line)
        n = 2
        base = key
        while key in table:
            key = "%s_%d" % (base, n)
            n += 1
        keys[ident] = key
        return key

    def tool(self, t):
        key = self._key(self.tools, self._tool_keys, t, "inline_" + re.sub(r"\W", "_", t.name))
        if key not in self.tools:
            params = json.loads(t.parameters)
            self.tools[key] = {"type": "function",
                               "function": {"name": t.name, "description": t.description,
                                            "parameters": params}}
        return key

    def message(self, m):
        key = self._key(self.messages, self._msg_keys, m, "inline_message")
        if key not in self.messages:
            self.messages[key] = message_json(m)
        return key


def message_json(m):
    out = OrderedDict()
    out["role"] = m.role
    if m.content:
        out["content"] = m.content
    elif m.content_parts:
        out["content"] = [{"type": t, "text": x} for t, x in m.content_parts]
    else:
        out["content"] = ""
    if m.reasoning_content:
        out["reasoning_content"] = m.reasoning_content
    if m.tool_name:
        out["name"] = m.tool_name
    if m.tool_call_id:
        out["tool_call_id"] = m.tool_call_id
    if m.tool_calls:
        calls = []
        for name, args, cid in m.tool_calls:
            parsed = parse_json_or_none(args)
            tc = OrderedDict()
            if cid:
                tc["id"] = cid
            tc["type"] = "function"
            tc["function"] = {"name": name, "arguments": args if parsed is None else parsed}
            calls.append(tc)
        out["tool_calls"] = calls
    return out


def expect_json(m):
    calls = []
    for name, args, cid in m.tool_calls:
        calls.append(OrderedDict([("name", name), ("arguments", parse_json_or_none(args)),
                                  ("arguments_raw", args), ("id", cid)]))
    return OrderedDict([("content", m.content), ("reasoning_content", m.reasoning_content),
                        ("tool_calls", calls)])


def case_json(c, reg):
    p = c["params"]
    out = OrderedDict()
    out["template"] = c["template"]
    out["line"] = c["line"]
    out["input"] = c["input"]
    out["tools"] = [reg.tool(t) for t in p["tools"]] if "tools" in p else None
    out["tool_choice"] = p.get("tool_choice")
    out["parallel_tool_calls"] = p.get("parallel_tool_calls")
    out["reasoning_format"] = p.get("reasoning_format")
    out["enable_thinking"] = p.get("enable_thinking")
    out["messages"] = [reg.message(m) for m in p["messages"]] if "messages" in p else None
    out["add_generation_prompt"] = p.get("add_generation_prompt")
    cont = p.get("continue_final_message")
    out["continue_final_message"] = cont
    if "json_schema" in p:
        schema = parse_json_or_none(p["json_schema"])
        out["json_schema"] = p["json_schema"] if schema is None else schema
    else:
        out["json_schema"] = None
    out["is_partial"] = c["is_partial"]
    out["expect"] = expect_json(c["expect"]) if c["expect"] is not None else None
    out["expect_fail"] = c["expect_fail"]
    out["expect_reconstruction"] = c["expect_reconstruction"]
    if c["conditions"]:
        out["condition"] = " && ".join("(%s)" % x for x in c["conditions"]) \
            if len(c["conditions"]) > 1 else c["conditions"][0]
    if c.get("note"):
        out["note"] = c["note"]
    return out


def spot_checks(globals_env):
    """A few shared definitions, ported by hand, must match what was extracted."""
    expected_msgs = {
        "message_user": ("user", "Hey there!", (), (), "", "", ""),
        "message_assist": ("assistant", "Hello, world!\nWhat's up?", (), (), "", "", ""),
        "message_assist_thoughts": ("assistant", "Hello, world!\nWhat's up?", (), (),
                                    "I'm\nthinking", "", ""),
        "message_assist_call": ("assistant", "", (),
                                (("special_function", '{"arg1": 1}', ""),), "", "", ""),
        "message_assist_call_id": ("assistant", "", (),
                                   (("special_function", '{"arg1":1}', "123456789"),), "", "", ""),
        "message_assist_prefill_content": ("assistant", "Hello, ", (), (), "I'm thinking", "", ""),
        "message_assist_prefill_reasoning": ("assistant", "", (), (), "I'm", "", ""),
    }
    expected_tools = {
        "special_function_tool": ("special_function", "I'm special", {
            "type": "object",
            "properties": {"arg1": {"type": "integer", "description": "The arg."}},
            "required": ["arg1"]}),
        "python_tool": ("python", "an ipython interpreter", {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "Python code to execute."}},
            "required": ["code"]}),
        "empty_args_tool_no_schema": ("empty_args_no_schema",
                                      "A tool that takes no arguments and has no parameters schema",
                                      {}),
    }
    problems = []
    for name, want in expected_msgs.items():
        try:
            got = globals_env.lookup(name)
        except CxxError:
            problems.append("%s missing" % name)
            continue
        if not isinstance(got, Msg) or got.fields() != want:
            problems.append("%s differs from the hand port" % name)
    for name, (tname, desc, params) in expected_tools.items():
        try:
            got = globals_env.lookup(name)
        except CxxError:
            problems.append("%s missing" % name)
            continue
        if not isinstance(got, Tool) or got.name != tname or got.description != desc or \
                json.loads(got.parameters) != params:
            problems.append("%s differs from the hand port" % name)
    return problems


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 2
    src_path = argv[1]
    here = os.path.dirname(os.path.abspath(__file__))
    out_path = argv[2] if len(argv) > 2 else os.path.join(
        os.path.dirname(here), "tests", "chat", "llama_chat_cases.json")
    with open(src_path, encoding="utf-8") as f:
        src = f.read()
    toks = lex(src)
    funcs, decls = scan_top_level(toks)
    interp = Interpreter(funcs)

    for name, ok in interp.helper_ok.items():
        if not ok:
            print("warning: helper %s is missing or changed (fingerprint %s); cases using it are "
                  "skipped" % (name, fingerprint(funcs[name].all_tokens) if name in funcs else "-"),
                  file=sys.stderr)

    # shared definitions
    for d in decls:
        decl = interp.parse_declaration(d)
        if decl is None:
            continue
        try:
            interp.exec_declaration(decl, interp.globals)
        except (CxxError, ValueError, TypeError, IndexError):
            pass
    problems = spot_checks(interp.globals)
    if problems:
        for p in problems:
            print("error: %s" % p, file=sys.stderr)
        return 1

    # roots: test functions that are not called by another test function
    # (main only dispatches to the test functions, some of them more than once)
    testers = [n for n in funcs if n != "main" and interp.function_has_tests(n)]
    called = set()
    for n in testers:
        body = funcs[n].body
        for k, t in enumerate(body):
            if t.kind == "id" and t.val in testers and t.val != n and k + 1 < len(body) \
                    and body[k + 1].is_op("("):
                called.add(t.val)
    roots = [n for n in testers if n not in called]
    for n in roots:
        interp.run_function(n, [], funcs[n].line)

    reg = Registry()
    # every shared tool and message, in source order
    for v in interp.globals.vars.values():
        if isinstance(v, Tool):
            reg.tool(v)
        elif isinstance(v, Msg):
            reg.message(v)
    cases = [case_json(c, reg) for c in interp.cases]
    skipped = []
    for s in interp.skipped:
        skipped.append(OrderedDict([("template", s["template"]), ("line", s["line"]),
                                    ("reason", s["reason"])]))

    # every .run() of the file must be accounted for
    run_lines = set()
    for k, t in enumerate(toks):
        if t.is_id("test") and k > 0 and toks[k - 1].is_op(".") and k + 1 < len(toks) \
                and toks[k + 1].is_op("(") and k > 1 and toks[k - 2].kind == "id":
            run_lines.add(t.line)
    seen_lines = {c["line"] for c in cases} | {s["line"] for s in skipped}
    for line in sorted(run_lines - seen_lines):
        skipped.append(OrderedDict([("template", None), ("line", line),
                                    ("reason", "test call never reached by the interpreter")]))

    doc = OrderedDict()
    doc["source"] = DEFAULT_SOURCE
    doc["semantics"] = SEMANTICS
    doc["tools"] = reg.tools
    doc["messages"] = reg.messages
    doc["cases"] = cases
    doc["skipped"] = skipped
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")

    per_template = Counter(c["template"] for c in cases)
    width = max(len(t) for t in per_template) if per_template else 10
    for t in sorted(per_template, key=str.lower):
        print("%-*s %4d" % (width, t, per_template[t]))
    print("%-*s %4d" % (width, "total cases", len(cases)))
    print("%-*s %4d" % (width, "templates", len(per_template)))
    print("%-*s %4d" % (width, "skipped", len(skipped)))
    for s in skipped:
        print("  skipped line %s (%s): %s" % (s["line"], s["template"], s["reason"]))
    print("wrote %s" % out_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
