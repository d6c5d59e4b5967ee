"""OpenAI Responses request bodies, validated into one ``GenerationRequest``.

``input`` (a string, or items: messages with ``input_text`` / ``output_text`` parts,
``function_call`` and ``function_call_output`` items) becomes the internal messages (a call's
``arguments`` text read into an object); ``instructions`` the system message; function tools
``ToolSpec``; ``tool_choice`` the internal choice; ``text.format`` the constraint; ``reasoning.effort``
the reasoning switches. Errors name Responses' own fields (``tools[0].parameters``,
``input[2].arguments``). Earlier turns named by ``previous_response_id`` are put in front by
``responses_api``.

What agents send beyond function tools is accepted with a fixed meaning (Codex sends most of it):

- ``namespace`` tools: their function tools are offered by their own names, and a call of one
  comes back with its ``namespace``;
- ``custom`` (freeform) tools: offered as a function of one string, ``input``; a call comes back
  as a ``custom_tool_call`` with that input;
- hosted tools (``web_search``, ``file_search``, ``code_interpreter``, ``image_generation``,
  ``computer_use*``, ``mcp``, ``local_shell``, ``tool_search``, ...) are not offered to the model:
  nothing here would run them;
- input items of those tools and of OpenAI's own features (``reasoning``, ``compaction``,
  ``*_call`` items of hosted tools) are not shown to the model (an ``item_reference`` is a 400:
  nothing here looks items up by id);
  ``custom_tool_call`` / ``custom_tool_call_output`` are, like function calls and their outputs;
- a user's ``input_image`` (a data URL) and ``input_audio`` (WAV) go to a model that reads them
  (``runtime.server.media_input``); an image or file inside a tool's output becomes a short
  note in its text, and an ``input_file`` is a 400.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime.engine.constraint_spec import JSON_OBJECT
from runtime.sampling_params import DEFAULT_TOP_K, SamplingParams
from runtime.server.errors import bad_request
from runtime.server.media_input import MediaInput
from runtime.server.generate.constraint_jobs import CompileJob
from runtime.server.generate.reasoning_options import reasoning
from runtime.server.generate.request import GenerationRequest, Message, ToolCall
from runtime.server.wire.openai.schemas import DEFAULT_TEMPERATURE, parallel_tool_calls
from runtime.server.generate.structured_output import extension_constraint, schema_constraint
from runtime.server.generate.tool_checks import OPENAI, ToolList, call_arguments, checked_choice
from runtime.server.validation import boolean, int_option, option
from runtime.tool_choice import AUTO, NONE, REQUIRED, ToolChoice, function_choice

ROLES = {"user", "assistant", "system", "developer"}
_TEXT_PARTS = {"input_text", "output_text", "text", "refusal"}
EFFORTS = {"none", "minimal", "low", "medium", "high", "xhigh"}
_REFUSED = {"background": "background responses", "conversation": "conversations (use previous_response_id)",
            "prompt": "prompt templates"}
_MEDIA_PARTS = {"input_image", "input_file", "input_audio"}
#: the one parameter a custom (freeform) tool is offered with
CUSTOM_INPUT = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"],
                "additionalProperties": False}
#: input items with nothing for the model to read again
_UNSHOWN_ITEMS = {"reasoning", "compaction", "additional_tools"}


@dataclass(slots=True)
class ResponsesRequest:
    """The internal request (``gen``; its messages are set once the stored turns are read) and
    what the response object shows of the body."""

    gen: GenerationRequest
    input_messages: list[Message]  # this turn's input, without the instructions
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool = True
    #: the tools offered, as the response object lists them (function tools, namespaces flattened)
    shown_tools: list[dict] = field(default_factory=list)
    text_format: dict = field(default_factory=lambda: {"type": "text"})  # ``text.format`` as given
    reasoning_effort: str | None = None  # ``reasoning.effort`` as given
    metadata: dict = field(default_factory=dict)
    max_output_tokens: int | None = None
    #: how a call of a tool comes back: ``("namespace", ns)`` or ``("custom", "")`` by tool name
    tool_kinds: dict[str, tuple[str, str]] = field(default_factory=dict)


def _part_text(content: Any, where: str, *, media: bool = False, inputs: MediaInput | None = None) -> str:
    """Text parts as one string; ``media``: image, file and audio parts become a note (a tool's
    output); ``inputs``: images and audio are taken into it, leaving their markers."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"'{where}' must be a string or a list of content parts", where)
    texts = []
    for j, p in enumerate(content):
        kind = p.get("type") if isinstance(p, dict) else None
        if kind in _TEXT_PARTS and isinstance(p.get("text", p.get("refusal")), str):
            texts.append(p.get("text", p.get("refusal")))
        elif kind == "input_image" and inputs is not None and not media:
            url = p.get("image_url")
            if p.get("file_id") is not None and url is None:
                raise bad_request(f"'{where}[{j}].file_id': files are not stored here; send the image inline as "
                                  "image_url (a data URL)", f"{where}[{j}].file_id")
            texts.append(inputs.image_url(url.get("url") if isinstance(url, dict) else url, f"{where}[{j}].image_url"))
        elif kind == "input_audio" and inputs is not None and not media:
            audio = p.get("input_audio")
            audio = audio if isinstance(audio, dict) else p
            texts.append(inputs.audio(audio.get("data"), audio.get("format"), f"{where}[{j}].input_audio"))
        elif kind in _MEDIA_PARTS and media:
            texts.append(f"[{kind.removeprefix('input_')} not shown: this model reads text only]")
        elif kind in _MEDIA_PARTS:
            raise bad_request(f"'{where}[{j}]': the models served here take text only, not {kind}", f"{where}[{j}]")
        else:
            raise bad_request(f"'{where}[{j}]' must be a text part (input_text or output_text)", f"{where}[{j}]")
    return "".join(texts)


def _function_call(item: dict, where: str) -> ToolCall:
    """A ``function_call`` item (``arguments``: JSON text of an object), or a ``custom_tool_call``
    (its ``input`` is the one argument of the function it is offered as)."""
    custom = item.get("type") == "custom_tool_call"
    for key in ("call_id", "name", "input" if custom else "arguments"):
        if not isinstance(item.get(key), str):
            raise bad_request(f"'{where}.{key}' must be a string", f"{where}.{key}")
    arguments = {"input": item["input"]} if custom else call_arguments(OPENAI, item["arguments"], f"{where}.arguments")
    return ToolCall(item["call_id"], item["name"], arguments)


def read_input(raw: Any, inputs: MediaInput | None = None) -> list[Message]:
    """``input`` as internal messages; consecutive function calls join one assistant turn.
    ``inputs``: the messages' images and audio go into it (their markers in the text)."""
    if isinstance(raw, str):
        return [Message("user", raw)]
    if not isinstance(raw, list) or not raw:
        raise bad_request("'input' must be a string or a non-empty list of items", "input")
    out: list[Message] = []
    for i, item in enumerate(raw):
        where = f"input[{i}]"
        kind = item.get("type", "message" if "role" in item else None) if isinstance(item, dict) else None
        if kind == "message":
            if item.get("role") not in ROLES:
                raise bad_request(f"'{where}.role' must be one of {sorted(ROLES)}", f"{where}.role")
            out.append(Message(item["role"], _part_text(item.get("content", ""), f"{where}.content", inputs=inputs)))
        elif kind in ("function_call", "custom_tool_call"):
            call = _function_call(item, where)
            if out and out[-1].role == "assistant" and out[-1].tool_calls:
                out[-1].tool_calls.append(call)
            else:
                out.append(Message("assistant", "", tool_calls=[call]))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            if not isinstance(item.get("call_id"), str):
                raise bad_request(f"'{where}.call_id' must be a string", f"{where}.call_id")
            out.append(Message("tool", _part_text(item.get("output", ""), f"{where}.output", media=True),
                               tool_call_id=item["call_id"]))
        elif kind in _UNSHOWN_ITEMS or (isinstance(kind, str) and kind.endswith(("_call", "_call_output"))):
            continue  # reasoning is not re-read by chat templates; hosted tools' items ran elsewhere
        else:
            raise bad_request(f"'{where}': item type {kind!r} is not supported by this server", where)
    return out


class _Tools:
    """The tools of a body: offered (``ToolList``), shown in the response object, and how each
    non-plain one's calls come back (see the module doc)."""

    def __init__(self, count: int) -> None:
        self.offered = ToolList(OPENAI, count)
        self.shown: list[dict] = []
        self.kinds: dict[str, tuple[str, str]] = {}

    def read(self, tools: Any, at: str = "tools") -> None:
        if tools is None:
            return
        if not isinstance(tools, list):
            raise bad_request(f"'{at}' must be a list", at)
        for i, t in enumerate(tools):
            where = f"{at}[{i}]"
            if not isinstance(t, dict) or not isinstance(t.get("type"), str):
                raise bad_request(f"'{where}' must be a tool object with a 'type'", f"{where}.type")
            kind = t["type"]
            if kind == "function":
                self._add(t, t.get("parameters"), where, t.get("strict"))
            elif kind == "custom":
                self.kinds[self._add(t, CUSTOM_INPUT, where)] = ("custom", "")
            elif kind == "namespace":
                namespace = _tool_name(t, where)
                before = len(self.offered.tools)
                self.read(t.get("tools"), f"{where}.tools")
                for spec in self.offered.tools[before:]:
                    self.kinds.setdefault(spec.name, ("namespace", namespace))
            # any other type is a hosted tool (web_search, file_search, mcp, ...): not offered

    def _add(self, t: dict, parameters: Any, where: str, strict: Any = None) -> str:
        spec = self.offered.add(_tool_name(t, where), t.get("description"), parameters, where)
        self.shown.append({"type": "function", "name": spec.name, "description": spec.description,
                           "parameters": spec.parameters, "strict": strict})
        return spec.name


def _tool_name(t: dict, where: str) -> str:
    if not isinstance(t.get("name"), str) or not t["name"]:
        raise bad_request(f"'{where}.name' must be a non-empty string", f"{where}.name")
    return t["name"]


_CHOICES = {"auto": AUTO, "none": NONE, "required": REQUIRED}


def read_tool_choice(choice: Any) -> ToolChoice | None:
    if choice is None:
        return None
    if isinstance(choice, str) and choice in _CHOICES:
        return _CHOICES[choice]
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return function_choice(choice["name"])
    raise bad_request("'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", \"name\": ...}",
                      "tool_choice")


def read_text_format(text: Any) -> CompileJob | None:
    """``text.format`` as the constraint to compile (None for plain text)."""
    if text is None:
        return None
    if not isinstance(text, dict):
        raise bad_request("'text' must be an object", "text")
    fmt = text.get("format")
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return None
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        return CompileJob(JSON_OBJECT, None, "text.format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        if not isinstance(fmt.get("schema"), dict) or not isinstance(fmt.get("name"), str):
            raise bad_request("'text.format' json_schema needs a 'name' and a 'schema' object", "text.format")
        if fmt.get("strict") is not None and not isinstance(fmt["strict"], bool):
            raise bad_request("'text.format.strict' must be true or false", "text.format.strict")
        job, _ = schema_constraint(fmt["schema"], "text.format.schema")
        return job
    raise bad_request("'text.format.type' must be 'text', 'json_object' or 'json_schema'", "text.format.type")


def _reasoning(body: dict) -> str | None:
    r = body.get("reasoning")
    if r is None:
        return None
    if not isinstance(r, dict) or (r.get("effort") is not None and r["effort"] not in EFFORTS):
        raise bad_request(f"'reasoning.effort' must be one of {sorted(EFFORTS)}", "reasoning.effort")
    return r.get("effort")


def _optional_str(body: dict, name: str) -> str | None:
    v = body.get(name)
    if v is not None and not isinstance(v, str):
        raise bad_request(f"'{name}' must be a string", name)
    return v


def parse_responses(body: Any) -> ResponsesRequest:
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    for name, what in _REFUSED.items():
        if body.get(name) not in (None, False):
            raise bad_request(f"'{name}': {what} are not supported by this server", name)
    model, instructions = _optional_str(body, "model"), _optional_str(body, "instructions")
    max_tokens = int_option(body, "max_output_tokens", limit="max_tokens")
    top_k = int_option(body, "top_k")
    params = SamplingParams(temperature=option(body, "temperature", DEFAULT_TEMPERATURE),
                            top_k=DEFAULT_TOP_K if top_k is None else top_k,
                            top_p=option(body, "top_p", 1.0), max_tokens=max_tokens)
    media = MediaInput()
    inputs = read_input(body.get("input"), media)
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise bad_request("'metadata' must be an object", "metadata")
    store = body.get("store")
    top = int_option(body, "top_logprobs", limit="top_logprobs")
    params.logprobs, params.top_logprobs = top is not None, top or 0
    gen = GenerationRequest(model, params, stream=boolean(body, "stream"), media=media.media)
    raw_tools = body.get("tools")
    tools = _Tools(len(raw_tools) if isinstance(raw_tools, list) else 0)
    tools.read(raw_tools)
    gen.tools = tools.offered.tools
    gen.tool_choice = checked_choice(OPENAI, read_tool_choice(body.get("tool_choice")), gen.tools, "tool_choice")
    gen.parallel_tool_calls = parallel_tool_calls(body)
    gen.constraint = read_text_format(body.get("text")) or extension_constraint(body)
    effort = _reasoning(body)
    gen.think, gen.reasoning_effort = reasoning(None, effort)
    return ResponsesRequest(
        gen, inputs, instructions or None, _optional_str(body, "previous_response_id"),
        store=True if store is None else boolean(body, "store"), shown_tools=tools.shown, tool_kinds=tools.kinds,
        text_format=_text_format(body.get("text")), reasoning_effort=effort, metadata=metadata,
        max_output_tokens=max_tokens)


def _text_format(text: Any) -> dict:
    fmt = text.get("format") if isinstance(text, dict) else None
    return fmt if isinstance(fmt, dict) else {"type": "text"}
