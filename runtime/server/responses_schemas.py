"""OpenAI Responses request bodies, validated and translated into one ``GenerationRequest``.

``input`` (a string, or items: messages with ``input_text`` / ``output_text`` parts,
``function_call`` and ``function_call_output`` items) becomes OpenAI-shaped chat messages;
``instructions`` the system message; function tools, ``tool_choice`` and ``text.format`` the
chat API's ``tools``, ``tool_choice`` and ``response_format``. Earlier turns named by
``previous_response_id`` are put in front by ``responses_api``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime.sampling_params import DEFAULT_TOP_K, SamplingParams
from runtime.server.errors import bad_request
from runtime.server.schemas import DEFAULT_TEMPERATURE, GenerationRequest
from runtime.server.structured_output import extension_fields
from runtime.server.validation import boolean, int_option, option
from runtime.server.tool_shapes import function_tool, tool_list

ROLES = {"user", "assistant", "system", "developer"}
_TEXT_PARTS = {"input_text", "output_text", "text", "refusal"}
EFFORTS = {"none", "minimal", "low", "medium", "high", "xhigh"}
_REFUSED = {"background": "background responses", "conversation": "conversations (use previous_response_id)",
            "prompt": "prompt templates"}


@dataclass(slots=True)
class ResponsesRequest:
    gen: GenerationRequest
    input_messages: list[dict]  # this turn's input, without the instructions
    instructions: str | None = None
    previous_response_id: str | None = None
    store: bool = True
    tools: list[dict] = field(default_factory=list)  # OpenAI chat function tools
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool = True
    response_format: dict | None = None  # OpenAI chat's response_format, for json_schema / json_object
    text_format: dict = field(default_factory=lambda: {"type": "text"})  # ``text.format`` as given
    extensions: dict = field(default_factory=dict)  # Hearth's ``regex`` / ``grammar``
    reasoning_effort: str | None = None
    metadata: dict = field(default_factory=dict)
    max_output_tokens: int | None = None

    @property
    def uses_tools(self) -> bool:
        return bool(self.tools) or any(m["role"] == "tool" or m.get("tool_calls") for m in self.input_messages)


def _part_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"'{where}' must be a string or a list of content parts", where)
    texts = []
    for j, p in enumerate(content):
        kind = p.get("type") if isinstance(p, dict) else None
        if kind in _TEXT_PARTS and isinstance(p.get("text", p.get("refusal")), str):
            texts.append(p.get("text", p.get("refusal")))
        elif kind in ("input_image", "input_file", "input_audio"):
            raise bad_request(f"'{where}[{j}]': the models served here take text only, not {kind}", f"{where}[{j}]")
        else:
            raise bad_request(f"'{where}[{j}]' must be a text part (input_text or output_text)", f"{where}[{j}]")
    return "".join(texts)


def _function_call(item: dict, where: str) -> dict:
    for key in ("call_id", "name", "arguments"):
        if not isinstance(item.get(key), str):
            raise bad_request(f"'{where}.{key}' must be a string", f"{where}.{key}")
    return {"id": item["call_id"], "type": "function",
            "function": {"name": item["name"], "arguments": item["arguments"]}}


def translate_input(raw: Any) -> list[dict]:
    """``input`` as OpenAI-shaped chat messages; consecutive function calls join one assistant turn."""
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise bad_request("'input' must be a string or a non-empty list of items", "input")
    out: list[dict] = []
    for i, item in enumerate(raw):
        where = f"input[{i}]"
        kind = item.get("type", "message" if "role" in item else None) if isinstance(item, dict) else None
        if kind == "message":
            if item.get("role") not in ROLES:
                raise bad_request(f"'{where}.role' must be one of {sorted(ROLES)}", f"{where}.role")
            out.append({"role": item["role"], "content": _part_text(item.get("content", ""), f"{where}.content")})
        elif kind == "function_call":
            call = _function_call(item, where)
            if out and out[-1]["role"] == "assistant" and out[-1].get("tool_calls"):
                out[-1]["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str):
                raise bad_request(f"'{where}.call_id' must be a string", f"{where}.call_id")
            out.append({"role": "tool", "tool_call_id": item["call_id"],
                        "content": _part_text(item.get("output", ""), f"{where}.output")})
        elif kind == "reasoning":
            continue  # earlier reasoning is not re-read by chat templates
        else:
            raise bad_request(f"'{where}': item type {kind!r} is not supported by this server", where)
    return out


def translate_tools(tools: Any) -> list[dict]:
    """Responses function tools (flat ``name`` / ``parameters``) as chat function tools."""
    out = []
    for i, t in enumerate(tool_list(tools, "'tools' must be a list")):
        if not isinstance(t, dict) or t.get("type") != "function":
            kind = t.get("type") if isinstance(t, dict) else None
            raise bad_request(f"'tools[{i}]': tool type {kind!r} is not available on this server (function tools only)",
                              f"tools[{i}]")
        if not isinstance(t.get("name"), str) or not t["name"]:
            raise bad_request(f"'tools[{i}].name' must be a non-empty string", f"tools[{i}].name")
        out.append(function_tool(t["name"], t.get("parameters"), t.get("description"), t.get("strict")))
    return out


def translate_tool_choice(choice: Any) -> str | dict | None:
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise bad_request("'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", \"name\": ...}",
                      "tool_choice")


def translate_text_format(text: Any) -> dict | None:
    """``text.format`` as chat's ``response_format`` (None for plain text)."""
    if text is None:
        return None
    if not isinstance(text, dict):
        raise bad_request("'text' must be an object", "text")
    fmt = text.get("format")
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return None
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        if not isinstance(fmt.get("schema"), dict) or not isinstance(fmt.get("name"), str):
            raise bad_request("'text.format' json_schema needs a 'name' and a 'schema' object", "text.format")
        return {"type": "json_schema", "json_schema": {k: fmt[k] for k in ("name", "schema", "strict", "description")
                                                       if fmt.get(k) is not None}}
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
    if body.get("top_logprobs"):
        raise bad_request("'top_logprobs' (logprobs) is not supported by this server", "top_logprobs")
    model, instructions = _optional_str(body, "model"), _optional_str(body, "instructions")
    max_tokens = int_option(body, "max_output_tokens", limit="max_tokens")
    top_k = int_option(body, "top_k")
    params = SamplingParams(temperature=option(body, "temperature", DEFAULT_TEMPERATURE),
                            top_k=DEFAULT_TOP_K if top_k is None else top_k,
                            top_p=option(body, "top_p", 1.0), max_tokens=max_tokens)
    inputs = translate_input(body.get("input"))
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise bad_request("'metadata' must be an object", "metadata")
    store = body.get("store")
    gen = GenerationRequest(model, params, stream=boolean(body, "stream"),
                            extra={"max_tokens_param": "max_output_tokens"})
    return ResponsesRequest(
        gen, inputs, instructions or None, _optional_str(body, "previous_response_id"),
        store=True if store is None else boolean(body, "store"), tools=translate_tools(body.get("tools")),
        tool_choice=translate_tool_choice(body.get("tool_choice")),
        parallel_tool_calls=True if body.get("parallel_tool_calls") is None else boolean(body, "parallel_tool_calls"),
        response_format=translate_text_format(body.get("text")), reasoning_effort=_reasoning(body),
        metadata=metadata, max_output_tokens=max_tokens, text_format=_text_format(body.get("text")),
        extensions=extension_fields(body))


def _text_format(text: Any) -> dict:
    fmt = text.get("format") if isinstance(text, dict) else None
    return fmt if isinstance(fmt, dict) else {"type": "text"}
