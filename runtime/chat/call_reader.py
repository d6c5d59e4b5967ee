"""Reading the tool calls of a reply in the syntax of its model's contract.

:func:`read_calls` reads the text from where a call section starts (its trigger) and says which
calls it holds so far: finished ones, and the one being written with its arguments as far as they
go (JSON text that only grows, so it can be sent as it comes). Markers match with the whitespace
around them free (a model writes ``<tool_call>`` with or without the template's newlines), and a
section may be entered at its first marker, at a call's marker or at the name's own marker (some
models skip the opening ``<tool_call>``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from runtime.chat.call_analysis import name_pattern
from runtime.chat.contract import JSON, KEY_SLOT, NAME_JSON, NAME_SLOT, PYTHON, CallSyntax
from runtime.chat.python_literals import Incomplete, NotLiteral, python_value
from runtime.chat.text_diff import last_marker

_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
#: how far a model may stray between a call's name and its arguments' marker (gpt-oss writes
#: ``<|constrain|>json`` where its template renders ``<|channel|>commentary json``)
_SLACK = 64


class _Need(Exception):
    """The text ends before the structure does."""


class _No(Exception):
    """The text is not what the syntax says comes here."""


@dataclass(slots=True)
class ReadCall:
    name: str
    id: str | None
    #: the arguments as JSON text, as far as they are known (only grows)
    args: str
    done: bool = False


@dataclass(slots=True)
class Section:
    calls: list[ReadCall] = field(default_factory=list)
    #: where the section ends in the text (None: still open)
    end: int | None = None
    #: the text is not a call section
    bad: bool = False


def _ws(text: str, p: int) -> int:
    while p < len(text) and text[p].isspace():
        p += 1
    return p


def _lit(text: str, p: int, marker: str, final: bool) -> int:
    """The position after ``marker`` at ``p`` (whitespace around it free)."""
    core = marker.strip()
    p = _ws(text, p)
    if not core:
        return p
    if text.startswith(core, p):
        return p + len(core)
    if core.startswith(text[p:]):
        if final:  # the output ended where a closing marker goes (an end-of-generation token)
            return len(text)
        raise _Need
    raise _No


def _try(text: str, p: int, marker: str, final: bool) -> int | None:
    """Like :func:`_lit`, None where the marker is not there."""
    try:
        return _lit(text, p, marker, final)
    except _No:
        return None


class CallReader:
    """Reads call sections in one syntax; ``schemas``: each tool's parameters (for the types
    of tagged argument values)."""

    def __init__(self, syntax: CallSyntax, schemas: dict[str, dict] | None = None) -> None:
        self.s = syntax
        self.schemas = schemas or {}
        self._suffix = re.compile(name_pattern(syntax.name_suffix.strip())) if syntax.name_suffix.strip() else None
        # (where the name is written again in them, only what follows it)
        last = last_marker(syntax.name_suffix.split(NAME_SLOT)[-1])
        self._suffix_end = last.group() if last is not None else None
        self._prefix_id = re.compile(name_pattern(syntax.name_prefix.strip())) if syntax.id_in_markers else None
        #: JSON scans in progress, by start: (scanned up to, depth, in a string, after a backslash);
        #: the text of one section only grows, so each character is scanned once
        self._scans: dict[int, tuple[int, int, bool, bool]] = {}
        self._last_end = 0

    def reset(self) -> None:
        """Forget the scans of the previous section."""
        self._scans.clear()

    # -- triggers ------------------------------------------------------------------------
    def triggers(self) -> list[tuple[str, str]]:
        """(text, entry) pairs where a call section may start, longest first."""
        s = self.s
        out: list[tuple[str, str]] = []
        if s.section_start.strip():
            out.append((s.section_start.strip(), "section"))
        if s.call_start.strip():
            out.append((s.call_start.strip(), "call"))
        if s.body != JSON and s.name_prefix.strip():
            core = s.name_prefix.strip()
            if s.id_in_markers:
                core = core[:core.find("call00001")] if "call00001" in core else core
            out.append((core, "name"))
            tail = _tail(core)
            if tail and len(tail) >= 4 and tail != core:
                out.append((tail, "tail"))
        if s.body == JSON and not s.section_start.strip() and not s.call_start.strip():
            key = s.extra_keys[0][0] if s.extra_keys else s.name_key
            out.append(("[{" if s.list_wrapped else "{", "bare"))
            out.append((f'{{"{key}"', "bare"))
        return sorted({t: e for t, e in out if t}.items(), key=lambda te: -len(te[0]))

    # -- sections ------------------------------------------------------------------------
    def read(self, text: str, entry: str, final: bool) -> Section:
        out = Section()
        try:
            self._section(text, entry, final, out)
        except _Need:
            if final:
                out.end = len(text) if out.calls else None
                out.bad = not out.calls
        except _No:
            out.bad = not out.calls or out.end is None and not any(c.done for c in out.calls)
            if out.calls and out.calls[-1].done and out.end is None:
                out.bad = False
                out.end = self._last_end
        return out

    def _section(self, text: str, entry: str, final: bool, out: Section) -> None:
        s = self.s
        p = 0
        self._last_end = 0
        if entry == "section" and s.section_start.strip():
            p = _lit(text, p, s.section_start, final)
        if s.list_wrapped:
            p = _lit(text, p, "[", final) if entry != "bare" or text.lstrip().startswith("[") else p
        first = True
        while True:
            if not first:
                at = self._next_call(text, p, final)
                if at is None:
                    self._finish(text, p, final, out)
                    return
                p = at
            p = self._call(text, p, final, out, entry if first else "call")
            self._last_end = p
            first = False

    def _next_call(self, text: str, p: int, final: bool) -> int | None:
        """The start of another call after ``p`` (past the separator), or None."""
        s = self.s
        q = _ws(text, p)
        if s.call_sep.strip():
            at = _try(text, q, s.call_sep, final)
            if at is None:
                return None
            q = at
        elif s.list_wrapped:
            at = _try(text, q, ",", final)
            if at is None:
                return None
            q = at
        q = _ws(text, q)
        if q >= len(text):
            if final:
                return None
            raise _Need
        opener = s.call_start.strip() or (s.name_prefix.strip() if s.body != JSON else "{")
        if text.startswith(opener, q):
            return q
        if not final and opener.startswith(text[q:]):
            raise _Need
        return None

    def _finish(self, text: str, p: int, final: bool, out: Section) -> None:
        s = self.s
        if s.list_wrapped:
            p = _lit(text, p, "]", final)
        if s.section_end.strip():
            at = _try(text, p, s.section_end, final)
            p = at if at is not None else p
        out.end = p

    # -- one call --------------------------------------------------------------------------
    def _call(self, text: str, p: int, final: bool, out: Section, entry: str) -> int:
        s = self.s
        if entry in ("section", "call") and s.call_start.strip():
            p = _lit(text, p, s.call_start, final)
        if s.body == JSON:
            p = self._json_call(text, p, final, out)
        else:
            cid = None
            if entry != "tail" and s.name_prefix.strip():
                p, cid = self._name_prefix(text, p, final)
            elif entry == "tail":
                p = _lit(text, p, _tail(s.name_prefix.strip()), final)
            p, name, cid2 = self._name(text, p, final)
            call = ReadCall(name, cid or cid2, "")
            out.calls.append(call)
            if s.body == NAME_JSON:
                p = self._json_args(text, p, final, call)
            elif s.body == PYTHON:
                p = self._python_args(text, p, final, call)
            else:
                p = self._tagged_args(text, p, final, call, name)
            if s.close.strip():
                at = _try(text, p, s.close, final)
                if at is None and self._opens_call(text, p):
                    at = p  # the model went on to the next call without this one's end marker (Kimi K2)
                if at is None:
                    raise _No
                p = at
            call.done = True
        if s.call_end.strip():
            at = _try(text, p, s.call_end, final)
            if at is None and self._opens_call(text, p):
                at = p  # as above, where a call's last marker is its own
            if at is None:
                raise _No
            p = at
        return p

    def _opens_call(self, text: str, p: int) -> bool:
        s = self.s
        opener = (s.call_start.strip() or s.name_prefix.strip()) if s.body != JSON else s.call_start.strip()
        return bool(opener) and text.startswith(opener, _ws(text, p))

    def _name_prefix(self, text: str, p: int, final: bool) -> tuple[int, str | None]:
        core = self.s.name_prefix.strip()
        if self._prefix_id is None:
            return _lit(text, p, core, final), None
        q = _ws(text, p)
        m = self._prefix_id.match(text, q)
        if m is None:
            if not final and len(text) - q < len(core) + 40:
                raise _Need
            raise _No
        return m.end(), m.groupdict().get("id")

    def _name(self, text: str, p: int, final: bool) -> tuple[int, str, str | None]:
        m = _NAME.match(text, p)
        if m is None:
            if p >= len(text) and not final:
                raise _Need
            raise _No
        if m.end() == len(text) and not final:
            raise _Need
        name, q = m.group(), m.end()
        cid = None
        if self._suffix is None and "\n" in self.s.name_suffix:
            # the name ends its line (Functionary v3.2's ``>>>NAME\n``), or the arguments follow it
            # at once (Ling's ``<tool_call>NAME<arg_key>``): a name that a space ends is a word of text
            gap = _ws(text, q)
            args = (self.s.arg_prefix.strip() or "{") if self.s.body != PYTHON else ""
            if "\n" in text[q:gap] or not args or text.startswith(args, gap):
                return q, name, cid
            if not final and args.startswith(text[gap:]):
                raise _Need
            raise _No
        if self._suffix is not None:
            sm = self._suffix.match(text, _ws(text, q))  # the template's whitespace before it is free
            if sm is not None:
                return sm.end(), name, sm.groupdict().get("id")
            if self._suffix_end is not None:
                at = text.find(self._suffix_end, q, q + _SLACK + len(self._suffix_end))
                if at >= 0 and "\n" not in text[q:at]:
                    return at + len(self._suffix_end), name, cid
            if not final and len(text) - q < len(self.s.name_suffix) + _SLACK:
                raise _Need
            raise _No
        return q, name, cid

    def _json_args(self, text: str, p: int, final: bool, call: ReadCall) -> int:
        p = _ws(text, p)
        if p >= len(text):
            raise _Need
        if text[p] != "{":
            raise _No
        end = self._json_end(text, p)
        call.args = text[p:end if end is not None else len(text)]
        if end is None:
            raise _Need
        try:
            value = json.loads(call.args)
        except ValueError:
            raise _No from None
        if not isinstance(value, dict):
            raise _No
        return end

    def _json_call(self, text: str, p: int, final: bool, out: Section) -> int:
        s = self.s
        p = _ws(text, p)
        if p >= len(text):
            raise _Need
        if text[p] != "{":
            raise _No
        end = self._json_end(text, p)
        if end is None:
            head = _header(s).match(text, p)
            if head is not None:  # the arguments as far as they go (not what follows them)
                a_end = self._json_end(text, head.end())
                out.calls.append(ReadCall(json.loads(f'"{head.group(1)}"'), None, text[head.end():a_end or len(text)]))
            raise _Need
        try:
            item = json.loads(text[p:end])
        except ValueError:
            raise _No from None
        name, args = _name_args(item, s)
        if name is None:
            raise _No
        head = _header(s).match(text, p)
        if head is not None:  # the arguments as written (what was sent while they came)
            a_end = self._json_end(text, head.end())
            if a_end is not None:
                args = text[head.end():a_end]
        cid = item.get("id") if isinstance(item.get("id"), str) else None
        if out.calls and not out.calls[-1].done and out.calls[-1].name == name:
            out.calls[-1].args, out.calls[-1].done, out.calls[-1].id = args, True, cid
        else:
            out.calls.append(ReadCall(name, cid, args, done=True))
        return end

    def _tagged_args(self, text: str, p: int, final: bool, call: ReadCall, name: str) -> int:
        s = self.s
        props = (self.schemas.get(name) or {}).get("properties") or {}
        parts: list[str] = []
        call.args = "{"
        while True:
            if s.close.strip():
                at = _try(text, p, s.close, final)
                if at is not None:
                    break
            elif parts and not _try(text, p, s.arg_sep, final):
                break
            q = p
            if parts and s.arg_sep.strip():
                q = _lit(text, q, s.arg_sep, final)
            if s.arg_prefix.strip():
                q = _lit(text, q, s.arg_prefix, final)
            mid = s.arg_mid.strip() or ":"
            k_end, mid = _find_loose(text, mid, q, q + 256)
            as_json = False
            if s.arg_mid_json.strip():
                j_end = text.find(s.arg_mid_json.strip(), q, q + 256)
                if j_end >= 0 and (k_end < 0 or j_end < k_end):
                    k_end, mid, as_json = j_end, s.arg_mid_json.strip(), True
            if k_end < 0:
                if not final and len(text) - q < 256:
                    raise _Need
                raise _No
            key = text[q:k_end].strip()
            q = k_end + len(mid)
            schema = props.get(key) if isinstance(props, dict) else None
            q, value = self._value(text, q, final, {"type": "json"} if as_json else schema, key)
            parts.append(f"{json.dumps(key, ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}")
            call.args = "{" + ", ".join(parts)
            p = q
        call.args = "{" + ", ".join(parts) + "}"
        return p

    def _python_args(self, text: str, p: int, final: bool, call: ReadCall) -> int:
        """``KEY=VALUE, ...`` up to the call's closing parenthesis (not taken)."""
        parts: list[str] = []
        call.args = "{"
        while True:
            q = _ws(text, p)
            if q >= len(text):
                raise _Need
            if text.startswith(self.s.close.strip() or ")", q):
                break
            if parts:
                if text[q] != ",":
                    raise _No
                q = _ws(text, q + 1)
            m = _KEY.match(text, q)
            if m is None:
                if q >= len(text):
                    raise _Need
                raise _No
            q = _ws(text, m.end())
            if q >= len(text):
                raise _Need
            if text[q] != "=":
                raise _No
            try:
                q, value = python_value(text, _ws(text, q + 1), final)
            except Incomplete:
                raise _Need from None
            except NotLiteral:
                raise _No from None
            parts.append(f"{json.dumps(m.group(), ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}")
            call.args = "{" + ", ".join(parts)
            p = q
        call.args = "{" + ", ".join(parts) + "}"
        return p

    def _json_end(self, text: str, p: int) -> int | None:
        state = self._scans.get(p)
        if state is not None and state[1] == 0 and state[0] > p:
            return state[0]  # scanned to its end before
        end, state = json_end(text, p, state)
        self._scans[p] = state
        return end

    def _value(self, text: str, q: int, final: bool, schema, key: str) -> tuple[int, object]:
        s = self.s
        if s.string_quote:
            if text.startswith(s.string_quote, q):
                end = text.find(s.string_quote, q + len(s.string_quote))
                if end < 0:
                    raise _Need
                return end + len(s.string_quote), text[q + len(s.string_quote):end]
            if text.startswith(("[", "{"), q):
                return _quoted_structure(text, q, s.string_quote, final)
            try:
                value, end = json.JSONDecoder().raw_decode(text, q)
            except ValueError:
                raise (_Need if not final else _No) from None
            if not final and isinstance(value, (int, float)):
                m = _NUMBER.match(text, q)
                if m is not None and m.end() == len(text):
                    raise _Need  # a number may go on (3 of 3.14, 1.5 of 1.5e10)
            return end, value
        arg_end = s.arg_end.replace(KEY_SLOT, key)
        end_core = arg_end.strip()
        cdata = _ws(text, q)
        if text.startswith(_CDATA, cdata) and end_core.startswith("</"):
            # an XML value as character data (MiniCPM5): its text may hold the end marker itself
            close = text.find("]]>", cdata + len(_CDATA))
            end = text.find(end_core, close + 3) if close >= 0 else -1
            if end < 0 or text[close + 3:end].strip():
                raise _Need if end < 0 else _No
            return end + len(end_core), _typed(text[cdata + len(_CDATA):close], schema)
        if not final and _CDATA.startswith(text[cdata:cdata + len(_CDATA)]) and cdata + len(_CDATA) > len(text):
            raise _Need
        end = text.find(end_core, q) if end_core else -1
        if end < 0:
            raise _Need
        raw = text[q:end]
        lead, trail = s.arg_mid[len(s.arg_mid.rstrip()):], arg_end[:len(arg_end) - len(arg_end.lstrip())]
        if lead and raw.startswith(lead):
            raw = raw[len(lead):]
        if trail and raw.endswith(trail):
            raw = raw[:len(raw) - len(trail)]
        if KEY_SLOT in s.arg_end and raw.strip().startswith(s.arg_prefix.strip()) and not _allows_string(schema):
            return end + len(end_core), self._nested(raw.strip(), schema)
        return end + len(end_core), _typed(raw, schema)

    def _nested(self, raw: str, schema) -> object:
        """A value written as tags inside an argument whose markers name it (MiniMax M3): an
        object's keys as tags, a list's elements as ``<item>`` tags, typed by the schema."""
        s = self.s
        prefix, mid = s.arg_prefix.strip(), s.arg_mid.strip() or ">"
        parts: list[tuple[str, str]] = []
        p = 0
        while True:
            p = _ws(raw, p)
            if p >= len(raw):
                break
            if not raw.startswith(prefix, p):
                return _typed(raw, schema)  # text that only begins like a tag
            k = raw.find(mid, p + len(prefix))
            if k < 0:
                return _typed(raw, schema)
            key = raw[p + len(prefix):k]
            opener, closer = f"{prefix}{key}{mid}", s.arg_end.replace(KEY_SLOT, key).strip()
            depth, q = 1, k + len(mid)
            while depth:  # the closing tag of this element, past nested ones of the same name
                c = raw.find(closer, q)
                if c < 0:
                    return _typed(raw, schema)
                o = raw.find(opener, q, c)
                depth, q = (depth + 1, o + len(opener)) if o >= 0 else (depth - 1, c + len(closer))
            parts.append((key, raw[k + len(mid):q - len(closer)]))
            p = q
        if parts and all(key == "item" for key, _ in parts):
            items = _branch(schema, "array").get("items")
            return [self._nested_or_typed(v, items) for _, v in parts]
        props = _branch(schema, "object").get("properties") or {}
        return {key: self._nested_or_typed(v, props.get(key) if isinstance(props, dict) else None) for key, v in parts}

    def _nested_or_typed(self, raw: str, schema) -> object:
        if raw.strip().startswith(self.s.arg_prefix.strip()) and not _allows_string(schema):
            return self._nested(raw.strip(), schema)
        return _typed(raw, schema)


_NUMBER = re.compile(r"-?\d+(\.\d*)?([eE][+-]?\d*)?")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CDATA = "<![CDATA["
_BARE_KEY = re.compile(r'([{,]\s*)([A-Za-z_][\w\-]*)\s*:')


def _find_loose(text: str, marker: str, start: int, stop: int) -> tuple[int, str]:
    """Where ``marker`` is in ``text[start:stop]`` with its inner whitespace free (a model writes
    ``</arg_key><arg_value>`` where the template puts a newline between), and the text found
    there; (-1, marker) where it is not."""
    if not any(ch.isspace() for ch in marker):
        return text.find(marker, start, stop), marker
    m = _loose(marker).search(text, start, min(len(text), stop))
    return (m.start(), m.group()) if m is not None else (-1, marker)


_LOOSE: dict[str, re.Pattern] = {}


def _loose(marker: str) -> re.Pattern:
    pat = _LOOSE.get(marker)
    if pat is None:
        pat = _LOOSE[marker] = re.compile(r"\s*".join(re.escape(part) for part in marker.split()))
    return pat


def _quoted_structure(text: str, q: int, quote: str, final: bool) -> tuple[int, object]:
    """A list or object written with ``quote`` around strings and bare keys (Gemma 4's
    ``{theme:<|"|>dark<|"|>,count:3}``), read as JSON."""
    depth, i, parts = 0, q, []
    while i < len(text):
        if text.startswith(quote, i):
            end = text.find(quote, i + len(quote))
            if end < 0:
                break
            parts.append(json.dumps(text[i + len(quote):end], ensure_ascii=False))
            i = end + len(quote)
            continue
        ch = text[i]
        depth += ch in "[{"
        depth -= ch in "]}"
        parts.append(ch)
        i += 1
        if depth == 0:
            try:
                return i, json.loads(_BARE_KEY.sub(r'\1"\2":', "".join(parts)))
            except ValueError:
                raise _No from None
    raise _Need if not final else _No


def _tail(marker: str) -> str:
    """The last word of a marker after its last special token (gpt-oss's ``to=functions.``): what
    a model writes even where it puts other markup before it."""
    m = last_marker(marker)
    rest = marker[m.end():] if m is not None else marker
    words = rest.split()
    return words[-1] if words else ""


def _allows_string(schema) -> bool:
    """A string is a value ``schema`` takes (then tags inside it are its text, as llama.cpp reads them)."""
    return bool(_branch(schema, "string")) or (isinstance(schema, dict) and isinstance(schema.get("type"), list)
                                               and "string" in schema["type"])


def _branch(schema, kind: str) -> dict:
    """The part of ``schema`` (or of its ``anyOf``/``oneOf`` alternatives) for a value of ``kind``."""
    if not isinstance(schema, dict):
        return {}
    for alt in (schema, *(schema.get("anyOf") or []), *(schema.get("oneOf") or [])):
        if isinstance(alt, dict) and alt.get("type") == kind:
            return alt
    return {}


def _typed(raw: str, schema) -> object:
    """A tagged value as the tool's schema types it: strings stay as written, the rest is JSON."""
    kind = schema.get("type") if isinstance(schema, dict) else None
    if kind == "string" or (isinstance(kind, list) and "string" in kind and len(kind) == 1):
        return raw
    try:
        return json.loads(raw.strip())
    except ValueError:
        return raw


def _name_args(item, s: CallSyntax) -> tuple[str | None, str]:
    if isinstance(item, list) and len(item) == 1:
        item = item[0]
    if not isinstance(item, dict):
        return None, ""
    if s.name_is_key:
        if len(item) != 1:
            return None, ""
        name, args = next(iter(item.items()))
    else:
        name = item.get(s.name_key, item.get("name"))
        args = item.get(s.args_key, item.get("arguments", item.get("parameters", {})))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            return None, ""
    if not isinstance(name, str) or not isinstance(args, dict):
        return None, ""
    return name, json.dumps(args, ensure_ascii=False)


_HEADERS: dict[CallSyntax, re.Pattern] = {}


def _header(s: CallSyntax) -> re.Pattern:
    """Where a JSON call's arguments begin once its name is written."""
    pat = _HEADERS.get(s)
    if pat is None:
        extra = "".join(rf'"{re.escape(k)}"\s*:\s*(?:"(?:[^"\\]|\\.)*"|\d+)\s*,\s*' for k, _ in s.extra_keys)
        if s.name_is_key:
            pat = re.compile(r'\{\s*"((?:[^"\\]|\\.)*)"\s*:\s*(?=\{)')
        else:
            pat = re.compile(rf'\{{\s*{extra}"{re.escape(s.name_key)}"\s*:\s*"((?:[^"\\]|\\.)*)"\s*,\s*'
                             rf'"{re.escape(s.args_key)}"\s*:\s*(?=\{{)')
        _HEADERS[s] = pat
    return pat


def json_end(text: str, p: int, state: tuple[int, int, bool, bool] | None = None
             ) -> tuple[int | None, tuple[int, int, bool, bool]]:
    """(the end of the JSON object or list starting at ``p`` or None while it is open, the scan's
    state to go on from)."""
    i, depth, in_str, esc = state if state is not None else (p, 0, False, False)
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
                return i, (i, depth, in_str, esc)
    return None, (i, depth, in_str, esc)
