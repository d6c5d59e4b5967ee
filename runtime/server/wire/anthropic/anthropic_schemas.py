"""Anthropic Messages request bodies, validated into one ``GenerationRequest``.

The content blocks become the internal messages: text blocks the message's text, an
assistant's ``tool_use`` blocks its calls (``input`` stays an object), a user's ``tool_result``
blocks ``tool`` messages; client tools become ``ToolSpec`` and ``tool_choice`` the internal choice
(``any`` is a required call); ``thinking`` and ``output_config`` the reasoning switches and the
constraint. ``thinking`` blocks of earlier turns are dropped (templates do not re-read
reasoning). Errors name the field the way Anthropic does (``max_tokens: Field required``,
``tools.0.input_schema: ...``).

What real clients send beyond the documented API is accepted with a fixed meaning:

- a ``system`` message inside ``messages`` (Claude Code puts one after its first user turn)
  joins the user turn before it (or after it, when it comes first), so the roles still
  alternate for the chat template and the earlier turns keep their tokens (the prefix cache
  still matches the next request);
- blocks produced by Anthropic's own server tools (``server_tool_use``, ``*_tool_result``,
  ``mcp_tool_use``, ``container_upload``) and earlier ``thinking`` are not shown to the model;
- a user's ``image`` block with a base64 source goes to a model that reads images (its marker in
  the text, ``runtime.server.media_input``); an image or document inside a ``tool_result``
  becomes a short note in the result's text, and a ``document`` block is a 400;
- server tools (``web_search_*``, ``code_execution_*``, ...) are not offered to the model,
  since nothing here would run them; client tools with Anthropic-defined schemas (``bash_*``,
  ``text_editor_*``) are offered with their documented input schemas;
- client metadata lines at the top of the system prompt (``client_metadata``) are removed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from runtime.sampling_params import DEFAULT_TOP_K, SamplingParams
from runtime.server.generate.client_metadata import strip_metadata
from runtime.server.errors import bad_request
from runtime.server.media_input import MediaInput
from runtime.media import IMAGE
from runtime.server.generate.constraint_jobs import CompileJob
from runtime.server.generate.reasoning_options import reasoning
from runtime.server.generate.request import GenerationRequest, Message, ToolCall, ToolSpec
from runtime.server.wire.openai.schemas import DEFAULT_TEMPERATURE
from runtime.server.generate.structured_output import extension_constraint, schema_constraint
from runtime.server.generate.tool_checks import ANTHROPIC, ToolList, call_arguments, checked_choice
from runtime.server.validation import boolean, int_option, integer, number, option, stop_list
from runtime.tool_choice import AUTO, NONE, REQUIRED, ToolChoice, function_choice

_SKIPPED_BLOCKS = {"thinking", "redacted_thinking", "server_tool_use", "mcp_tool_use", "mcp_tool_result",
                   "container_upload"}
#: media inside a tool's result: the model reads text only, so it is told what it cannot see
_MEDIA_BLOCKS = {"image", "document"}
#: Anthropic-defined client tools: their input schemas are fixed by the API, not sent
_DEFINED_TOOLS = {
    "bash": {"type": "object", "properties": {"command": {"type": "string"}, "restart": {"type": "boolean"}}},
    "text_editor": {"type": "object", "required": ["command", "path"], "properties": {
        "command": {"enum": ["view", "create", "str_replace", "insert", "undo_edit"]}, "path": {"type": "string"},
        "file_text": {"type": "string"}, "old_str": {"type": "string"}, "new_str": {"type": "string"},
        "insert_line": {"type": "integer"}, "view_range": {"type": "array", "items": {"type": "integer"}}}},
}
_REFUSED_FIELDS = {"mcp_servers": "MCP servers", "container": "containers"}
#: a client tool's fields: its name, description and parameters' schema
_TOOL_KEYS = ("name", "description", "input_schema")
_CHOICES = {"auto": AUTO, "any": REQUIRED, "none": NONE}


@dataclass(slots=True)
class MessagesRequest:
    gen: GenerationRequest
    #: the client's own stop strings (a reply that ends on one says ``stop_sequence``)
    stop_sequences: list[str] = field(default_factory=list)


def _texts(content: Any, where: str, *, media: bool = False) -> str:
    """A string, or a list of text blocks, as one string (system prompts, tool results).
    ``media``: image and document blocks become a note instead of a 400 (a tool's result)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{where}: must be a string or a list of text blocks", where)
    parts = []
    for j, b in enumerate(content):
        if media and isinstance(b, dict) and b.get("type") in _MEDIA_BLOCKS:
            parts.append(f"[{b['type']} not shown: this model reads text only]")
            continue
        if not isinstance(b, dict) or b.get("type") != "text" or not isinstance(b.get("text"), str):
            kind = b.get("type") if isinstance(b, dict) else type(b).__name__
            raise bad_request(f"{where}.{j}: only text blocks are supported here, got {kind!r}", f"{where}.{j}")
        parts.append(b["text"])
    return "\n".join(parts)


def _image_block(block: dict, where: str, media: MediaInput) -> str:
    """An ``image`` block with a base64 source: its marker (the bytes go into ``media``)."""
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "url":  # fetched where the service allows it
        return media.image_url(source.get("url"), f"{where}.source.url")
    if not isinstance(source, dict) or source.get("type") != "base64":
        raise bad_request(f"{where}.source: only base64 image sources are read here "
                          "({\"type\": \"base64\", \"media_type\": \"image/png\", \"data\": ...})", f"{where}.source")
    mime = source.get("media_type")
    if not isinstance(mime, str) or not mime.startswith("image/"):
        raise bad_request(f"{where}.source.media_type: must be an image type such as image/png", f"{where}.source.media_type")
    return media.add(IMAGE, source.get("data"), f"{where}.source.data")


def _audio_block(block: dict, where: str, media: MediaInput) -> str:
    """Hearth's ``audio`` block (Anthropic's API has none): shaped like an image block, a base64
    WAV source: its marker (the bytes go into ``media``)."""
    source = block.get("source")
    if not isinstance(source, dict) or source.get("type") != "base64":
        raise bad_request(f"{where}.source: an audio block takes a base64 source "
                          "({\"type\": \"base64\", \"media_type\": \"audio/wav\", \"data\": ...})", f"{where}.source")
    return media.audio(source.get("data"), source.get("media_type"), f"{where}.source")


def tool_call(block: dict, where: str) -> ToolCall:
    """An assistant's ``tool_use`` block as a call."""
    if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
        raise bad_request(f"{where}: a tool_use block needs a string 'id' and 'name'", where)
    return ToolCall(block["id"], block["name"], call_arguments(ANTHROPIC, block.get("input", {}), f"{where}.input"))


def tool_message(block: dict, where: str) -> Message:
    """A user's ``tool_result`` block as a ``tool`` message."""
    if not isinstance(block.get("tool_use_id"), str):
        raise bad_request(f"{where}.tool_use_id: Field required", f"{where}.tool_use_id")
    text = _texts(block.get("content"), f"{where}.content", media=True)
    if block.get("is_error") is True:
        text = f"Error: {text}"  # templates have no error flag on a result: it is said in the text
    return Message("tool", text, tool_call_id=block["tool_use_id"])


def read_message(m: Any, i: int, media: MediaInput | None = None) -> list[Message]:
    """One Anthropic message as internal messages (a user turn with tool results gives several).
    ``media``: a user's image blocks go into it, their markers into the text."""
    where = f"messages.{i}"
    if not isinstance(m, dict) or m.get("role") not in ("user", "assistant", "system"):
        raise bad_request(f"{where}.role: must be 'user' or 'assistant'", f"{where}.role")
    role, content = m["role"], m.get("content")
    if role == "system":
        return [Message("system", strip_metadata(_texts(content, f"{where}.content")))]
    if isinstance(content, str):
        return [Message(role, content)]
    if not isinstance(content, list):
        raise bad_request(f"{where}.content: must be a string or a list of content blocks", f"{where}.content")
    out: list[Message] = []
    texts: list[str] = []
    calls: list[ToolCall] = []
    for j, b in enumerate(content):
        at = f"{where}.content.{j}"
        kind = b.get("type") if isinstance(b, dict) else None
        if kind == "text" and isinstance(b.get("text"), str):
            texts.append(b["text"])
        elif kind == "tool_use" and role == "assistant":
            calls.append(tool_call(b, at))
        elif kind == "tool_result" and role == "user":
            out.append(tool_message(b, at))
        elif kind in _SKIPPED_BLOCKS or (isinstance(kind, str) and kind.endswith("_tool_result")):
            continue  # Anthropic's server tools ran these: nothing here for the model to read
        elif kind in ("image", "audio") and role == "user" and media is not None:
            texts.append(_image_block(b, at, media) if kind == "image" else _audio_block(b, at, media))
        elif kind in ("image", "document"):
            raise bad_request(f"{at}: the models served here take text only, not {kind} blocks", at)
        else:
            raise bad_request(f"{at}: unsupported content block {kind!r} in a {role} message", at)
    if role == "assistant":
        out.append(Message("assistant", "".join(texts), tool_calls=calls))
    elif texts or not out:
        out.append(Message("user", "\n".join(texts)))
    return out


def fold_system(messages: list[Message]) -> list[Message]:
    """System messages after the first user or assistant turn joined to the user turn before
    them (or, with none before, the one after): chat templates expect one system prompt at the
    top and alternating turns, and appending keeps every earlier token where it was. Leading
    system messages are joined into one."""
    out: list[Message] = []
    pending: list[str] = []  # system text that came before any user turn it could join
    for m in messages:
        if m.role != "system":
            if pending and m.role == "user" and out:
                m = replace(m, content="\n\n".join([*pending, m.content]))
                pending = []
            out.append(m)
            continue
        if not m.content:
            continue
        if not out or all(x.role == "system" for x in out):
            if out:
                out[0] = replace(out[0], content=f"{out[0].content}\n\n{m.content}")
            else:
                out.append(m)
        elif out[-1].role == "user":
            out[-1] = replace(out[-1], content=f"{out[-1].content}\n\n{m.content}")
        else:
            pending.append(m.content)
    if pending:
        out.append(Message("user", "\n\n".join(pending)))
    return out


def read_tools(tools: Any) -> list[ToolSpec]:
    """Anthropic's client tools (``name``, ``description``, ``input_schema``); Anthropic-defined
    client tools with their documented schemas; server tools left out."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise bad_request("tools: must be a list", "tools")
    out = ToolList(ANTHROPIC, len(tools))
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str) or not t["name"]:
            raise bad_request(f"tools.{i}.name: Field required", f"tools.{i}.name")
        kind = t.get("type")
        if kind not in (None, "custom"):
            defined = next((s for prefix, s in _DEFINED_TOOLS.items()
                            if isinstance(kind, str) and kind.startswith(prefix + "_")), None)
            if defined is not None:
                out.add(t["name"], None, defined, f"tools.{i}", _TOOL_KEYS)
            continue  # a server tool: Anthropic's servers run it, nothing here would, so it is not offered
        schema = t.get("input_schema")
        if schema is None:
            raise bad_request(f"tools.{i}.input_schema: Field required (a JSON schema object)", f"tools.{i}.input_schema")
        out.add(t["name"], t.get("description"), schema, f"tools.{i}", _TOOL_KEYS)
    return out.tools


def read_tool_choice(choice: Any) -> tuple[ToolChoice | None, bool | None]:
    """``tool_choice`` (None: not given), and whether calls may be parallel (from
    ``disable_parallel_tool_use``; None: not said)."""
    if choice is None:
        return None, None
    if not isinstance(choice, dict):
        raise bad_request("tool_choice: must be an object such as {\"type\": \"auto\"}", "tool_choice")
    kind = choice.get("type")
    disable = choice.get("disable_parallel_tool_use")
    if disable is not None and not isinstance(disable, bool):
        raise bad_request("tool_choice.disable_parallel_tool_use: must be true or false",
                          "tool_choice.disable_parallel_tool_use")
    parallel = None if disable is None else not disable
    if isinstance(kind, str) and kind in _CHOICES:
        return _CHOICES[kind], parallel
    if kind == "tool" and isinstance(choice.get("name"), str):
        return function_choice(choice["name"]), parallel
    raise bad_request("tool_choice.type: must be 'auto', 'any', 'none' or 'tool' (with a name)", "tool_choice.type")


def thinking_budget(thinking: Any) -> int | None:
    """``thinking``: enabled with a token budget, adaptive, or disabled."""
    if thinking is None:
        return None
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "disabled", "adaptive"):
        raise bad_request("thinking.type: must be 'enabled', 'disabled' or 'adaptive'", "thinking.type")
    if thinking["type"] == "disabled":
        return None
    budget = integer(thinking, "budget_tokens", 1, 2**31 - 1, "thinking.")
    return budget if budget is not None else 0


def read_output_config(config: Any) -> tuple[CompileJob | None, str | None]:
    """``output_config``: ``format`` (a JSON schema) as the constraint to compile, and ``effort``."""
    if config is None:
        return None, None
    if not isinstance(config, dict):
        raise bad_request("output_config: must be an object", "output_config")
    effort = config.get("effort")
    if effort is not None and effort not in ("low", "medium", "high", "xhigh", "max"):
        raise bad_request("output_config.effort: must be 'low', 'medium', 'high', 'xhigh' or 'max'",
                          "output_config.effort")
    fmt = config.get("format")
    if fmt is None:
        return None, effort
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise bad_request("output_config.format: must be {\"type\": \"json_schema\", \"schema\": {...}}",
                          "output_config.format")
    job, _ = schema_constraint(fmt["schema"], "output_config.format.schema")
    return job, effort


def _sampling(body: dict, count_only: bool) -> SamplingParams:
    if body.get("max_tokens") is None and not count_only:
        raise bad_request("max_tokens: Field required", "max_tokens")
    top_k = int_option(body, "top_k")
    return SamplingParams(
        temperature=number(body, "temperature", DEFAULT_TEMPERATURE, 0.0, 1.0),
        top_k=DEFAULT_TOP_K if top_k is None else top_k,
        top_p=option(body, "top_p", 1.0),
        max_tokens=None if count_only else int_option(body, "max_tokens"),
        stop=stop_list(body, "stop_sequences"),
    )


def parse_messages(body: Any, *, count_only: bool = False) -> MessagesRequest:
    """A /v1/messages body (``count_only``: a /v1/messages/count_tokens body, without max_tokens)."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    for name, what in _REFUSED_FIELDS.items():
        if body.get(name):
            raise bad_request(f"{name}: {what} are not supported by this server", name)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_request("model: must be a string", "model")
    params = _sampling(body, count_only)
    gen = GenerationRequest(model, params, stream=boolean(body, "stream"))
    gen.messages, gen.media = _conversation(body, count_only)
    gen.tools = read_tools(body.get("tools"))
    choice, parallel = read_tool_choice(body.get("tool_choice"))
    param = "tool_choice.name" if choice is not None and choice.kind == "function" else "tool_choice"
    gen.tool_choice = checked_choice(ANTHROPIC, choice, gen.tools, param)
    gen.parallel_tool_calls = parallel is not False
    job, effort = read_output_config(body.get("output_config"))
    gen.constraint = job or extension_constraint(body)
    budget = thinking_budget(body.get("thinking"))
    think = None if body.get("thinking") is None else budget is not None
    gen.think, gen.reasoning_effort = reasoning(think, effort)
    gen.reasoning_budget = budget or None  # 0: adaptive, the model decides
    return MessagesRequest(gen, list(params.stop))


def _conversation(body: dict, count_only: bool) -> tuple[list[Message], list | None]:
    """The system prompt and ``messages`` as one conversation, and the media in it."""
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise bad_request("messages: Field required (a non-empty list)", "messages")
    media = MediaInput()
    messages = fold_system([t for i, m in enumerate(raw) for t in read_message(m, i, media)])
    if isinstance(raw[-1], dict) and raw[-1].get("role") == "assistant" and not count_only:
        raise bad_request("messages: a final assistant message (prefilling the reply) is not supported by this server",
                          "messages")
    system = strip_metadata(_texts(body.get("system"), "system"))
    if messages and messages[0].role == "system":
        top = messages.pop(0).content
        system = f"{system}\n\n{top}" if system and top else system or top
    if system:
        messages.insert(0, Message("system", system))
    if not any(m.role != "system" for m in messages):
        raise bad_request("messages: at least one user message is required", "messages")
    return messages, media.media
