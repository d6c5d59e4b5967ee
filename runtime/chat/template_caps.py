"""What a chat template can render, found by rendering small conversations with it.

The probes are llama.cpp's (``common/jinja/caps.cpp``): render a conversation, then ask
which of its values the template read. A template that never reads the system message's
content has no system role; one that never reads ``tools[0].function.name`` does not
describe tools; one that reads ``arguments.arg`` takes the arguments as an object. The
values are wrapped so that every read is recorded (``_Uses``), as llama.cpp's engine
records its statistics; the probes never raise, a template that fails a probe simply
lacks that capability.

Hearth adds what it needs to shape a conversation the template would otherwise refuse or
drop silently: whether tool results are read, whether a null content breaks the template,
whether it insists on alternating user and assistant turns, and whether it insists on
nine-character call ids (Mistral's).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

Path = tuple[str | int, ...]
#: renders a template context (messages, tools, ...) to text; raises when the template fails
RenderFn = Callable[[dict[str, Any]], str]


@dataclass(slots=True, frozen=True)
class TemplateCaps:
    """What a chat template renders (the defaults are llama.cpp's before probing)."""

    supports_system_role: bool = True
    supports_tools: bool = True
    supports_tool_calls: bool = True
    supports_tool_responses: bool = True
    supports_parallel_tool_calls: bool = True
    #: it reads into ``function.arguments``: they are passed as an object, otherwise as JSON text
    requires_object_arguments: bool = False
    #: a null ``content`` breaks it or renders differently from ``""``
    requires_non_null_content: bool = False
    #: it reads content only as a list of typed parts
    requires_typed_content: bool = False
    #: it reads content given as a list of typed parts (otherwise text parts are joined)
    supports_typed_content: bool = False
    #: it refuses two user turns in a row (Mistral, Gemma 2)
    requires_alternating_roles: bool = False
    #: it refuses call ids that are not nine characters long (Mistral)
    requires_nine_char_call_ids: bool = False


class _Uses:
    """What a probe render read: the paths of the values it read, and what it did with them."""

    def __init__(self) -> None:
        self.read: set[Path] = set()
        self.ops: dict[Path, set[str]] = defaultdict(set)


class _TrackedDict(dict):
    __slots__ = ("_path", "_uses")

    def __init__(self, items: dict, path: Path, uses: _Uses) -> None:
        super().__init__((k, _track(v, path + (k,), uses)) for k, v in items.items())
        self._path = path
        self._uses = uses

    def __getitem__(self, key: Any) -> Any:
        value = super().__getitem__(key)
        self._uses.read.add(self._path + (key,))
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        return self[key] if key in self else default

    def items(self):  # type: ignore[override]
        self._uses.read.update(self._path + (k,) for k in self.keys())
        return super().items()

    def values(self):  # type: ignore[override]
        self._uses.read.update(self._path + (k,) for k in self.keys())
        return super().values()


class _TrackedList(list):
    __slots__ = ("_path", "_uses")

    def __init__(self, items: list, path: Path, uses: _Uses) -> None:
        super().__init__(_track(v, path + (i,), uses) for i, v in enumerate(items))
        self._path = path
        self._uses = uses

    def __getitem__(self, index: Any) -> Any:
        value = super().__getitem__(index)
        if isinstance(index, int):
            self._uses.read.add(self._path + (index % len(self),))
            self._uses.ops[self._path].add("array_access")
        return value

    def __iter__(self) -> Iterator[Any]:
        self._uses.ops[self._path].add("array_access")
        for i, value in enumerate(super().__iter__()):
            self._uses.read.add(self._path + (i,))
            yield value


class _TrackedStr(str):
    _path: Path
    _uses: _Uses

    def __new__(cls, value: str, path: Path, uses: _Uses) -> _TrackedStr:
        s = super().__new__(cls, value)
        s._path, s._uses = path, uses
        return s

    def __getitem__(self, index: Any) -> str:  # type: ignore[override]
        if isinstance(index, int):
            self._uses.ops[self._path].add("array_access")
        return str.__getitem__(self, index)

    def __iter__(self) -> Iterator[str]:
        self._uses.ops[self._path].add("array_access")
        return str.__iter__(self)


def _track(value: Any, path: Path, uses: _Uses) -> Any:
    if isinstance(value, dict):
        return _TrackedDict(value, path, uses)
    if isinstance(value, list):
        return _TrackedList(value, path, uses)
    if isinstance(value, str):
        return _TrackedStr(value, path, uses)
    return value


def _read_all(value: Any) -> None:
    """``tojson`` and ``string`` read everything inside a value (llama.cpp marks it deeply)."""
    if isinstance(value, _TrackedDict):
        value._uses.read.update(value._path + (k,) for k in dict.keys(value))
        for v in dict.values(value):
            _read_all(v)
    elif isinstance(value, _TrackedList):
        value._uses.read.update(value._path + (i,) for i in range(len(value)))
        for v in list.__iter__(value):
            _read_all(v)


def _untracked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _untracked(v) for k, v in dict.items(value)}
    if isinstance(value, list):
        return [_untracked(v) for v in list.__iter__(value)]
    if isinstance(value, str):
        return str(value)
    return value


def instrument(filters: dict[str, Any], tests: dict[str, Any]) -> None:
    """Make an environment's filters and tests note what they do to the probes' values
    (llama.cpp notes ``selectattr`` and ``test_is_string`` on a message's content)."""
    for name, func in filters.items():
        filters[name] = _recording(name, func)
    for name, func in tests.items():
        tests[name] = _recording(f"test_is_{name}", func)


def _recording(op: str, func: Callable) -> Callable:
    """A filter or test that notes ``op`` on the tracked value it is applied to."""
    value_at = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        value = args[value_at] if len(args) > value_at else None
        if isinstance(value, (_TrackedDict, _TrackedList, _TrackedStr)):
            value._uses.ops[value._path].add(op)
            if op in ("tojson", "string"):
                _read_all(value)
                # serialized untracked: Python's encoder would iterate a list subclass, which
                # reads as the template's own indexing
                args = (*args[:value_at], _untracked(value), *args[value_at + 1:])
        return func(*args, **kwargs)
    return wrapper


# -- the probe conversations (llama.cpp's, common/jinja/caps.cpp) -------------------------

_TOOLS = [{"name": "tool", "type": "function", "function": {
    "name": "tool1", "description": "Tool description",
    "parameters": {"type": "object", "properties": {"arg": {"type": "string", "description": "Arg description"}},
                   "required": ["arg"]}}}]
_USER = {"role": "user", "content": "User message"}


def _call(call_id: str, args: Any) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": "tool1", "arguments": args}}


def _tool_conversation(calls: list[dict], content: str | None = "") -> list[dict]:
    return [_USER, {"role": "assistant", "content": content, "tool_calls": calls},
            {"role": "tool", "content": "Tool response", "tool_call_id": calls[0]["id"]},
            {"role": "assistant", "content": "The tool response was 'tool response'"}, _USER]


class _Prober:
    def __init__(self, render: RenderFn) -> None:
        self._render = render

    def run(self, messages: list[dict], tools: list[dict] | None = None) -> tuple[bool, str, _Uses]:
        """Render once with tracked values: (rendered without failing, output, what was read)."""
        uses = _Uses()
        context = {"messages": _track(messages, ("messages",), uses), "tools": _track(tools or [], ("tools",), uses),
                   "bos_token": "", "eos_token": "", "add_generation_prompt": True}
        try:
            return True, self._render(context), uses
        except Exception:  # noqa: BLE001 - a probe that fails only says the template lacks a capability
            return False, "", uses

    def renders(self, messages: list[dict]) -> bool:
        return self.run(messages)[0]


def probe_caps(render: RenderFn) -> TemplateCaps:
    """Probe a template through ``render``, which renders a context (a template compiled in
    an environment whose filters and tests went through ``instrument``)."""
    p = _Prober(render)
    caps: dict[str, bool] = {}

    # typed content: does the template check for a string, or read content as a list?
    marker = "STRING_MARKER"
    ok, out, uses = p.run([{"role": "user", "content": marker}])
    content_ops = uses.ops[("messages", 0, "content")]
    as_list = bool(content_ops & {"selectattr", "array_access"})
    supports_typed = as_list
    supports_string = ok and not (as_list and marker not in out)
    if "test_is_string" in content_ops:
        ok, _, uses = p.run([{"role": "user", "content": []}])
        supports_typed = supports_typed or (ok and bool(uses.ops[("messages", 0, "content")]
                                                       & {"selectattr", "array_access"}))
    caps["supports_typed_content"] = supports_typed
    caps["requires_typed_content"] = supports_typed and not supports_string

    # system role: is the system message's content read at all?
    _, _, uses = p.run([{"role": "system", "content": "System message"}, _USER])
    caps["supports_system_role"] = ("messages", 0, "content") in uses.read

    caps.update(_probe_tools(p))
    caps.update(_probe_refusals(p, caps))
    return TemplateCaps(**caps)


_OBJECT_ARGS = {"arg": "value"}
_TEXT_ARGS = '{"arg": "value"}'


def _probe_tools(p: _Prober) -> dict[str, bool]:
    caps = {"supports_tools": True, "supports_tool_calls": True, "requires_object_arguments": False}
    # one call, arguments as an object
    ok, _, uses = p.run(_tool_conversation([_call("call00001", _OBJECT_ARGS)]), _TOOLS)
    if ok:
        caps["supports_tools"] = _tool_named(uses)
        caps["supports_tool_calls"] = ("messages", 1, "tool_calls") in uses.read
        caps["requires_object_arguments"] = caps["supports_tool_calls"] and (
            ("messages", 1, "tool_calls", 0, "function", "arguments", "arg") in uses.read)
    if not caps["requires_object_arguments"]:
        # one call, arguments as JSON text
        ok, _, uses = p.run(_tool_conversation([_call("call00001", _TEXT_ARGS)]), _TOOLS)
        if not ok:
            return {**caps, "supports_tools": False, "supports_tool_calls": False, "supports_tool_responses": False,
                    "supports_parallel_tool_calls": False}
        caps["supports_tools"] = caps["supports_tools"] and _tool_named(uses)
        caps["supports_tool_calls"] = caps["supports_tool_calls"] and ("messages", 1, "tool_calls") in uses.read
    caps["supports_tool_responses"] = ("messages", 2, "content") in uses.read

    # two calls in one message: is the second one read?
    args = _args_for(caps)
    ok, _, uses = p.run(_tool_conversation([_call("call00001", args), _call("call00002", args)]), _TOOLS)
    caps["supports_parallel_tool_calls"] = ok and ("messages", 1, "tool_calls", 1, "function") in uses.read
    return caps


def _args_for(caps: dict[str, bool]) -> Any:
    return _OBJECT_ARGS if caps["requires_object_arguments"] else _TEXT_ARGS


def _probe_refusals(p: _Prober, caps: dict[str, bool]) -> dict[str, bool]:
    """Hearth's probes: what the template refuses or renders wrongly that llama.cpp never sends
    it (a null content, two user turns in a row, a call id of another length)."""
    call = _call("call00001", _args_for(caps)) if caps["supports_tool_calls"] else None
    long_id = _call("call_0123456789abcdef01234567", _args_for(caps))
    return {
        "requires_non_null_content": _null_content_differs(p, call),
        "requires_alternating_roles": (not p.renders([_USER, {"role": "user", "content": "Another"}])
                                       and p.renders([_USER, {"role": "assistant", "content": "Reply"}, _USER])),
        "requires_nine_char_call_ids": call is not None and p.renders(_tool_conversation([call]))
                                       and not p.renders(_tool_conversation([long_id])),
    }


def _tool_named(uses: _Uses) -> bool:
    return ("tools", 0, "function", "name") in uses.read


def _null_content_differs(p: _Prober, call: dict | None) -> bool:
    """Whether a null content (llama.cpp never passes one) fails or renders unlike ``""``: in a
    turn with a call, mid-conversation (templates split the content of earlier turns)."""
    def conversation(content: str | None) -> list[dict]:
        if call is not None:
            return _tool_conversation([call], content)
        return [_USER, {"role": "assistant", "content": content}, _USER]
    tools = _TOOLS if call is not None else None
    ok_empty, out_empty, _ = p.run(conversation(""), tools)
    ok_null, out_null, _ = p.run(conversation(None), tools)
    return ok_empty and (not ok_null or out_null != out_empty)
