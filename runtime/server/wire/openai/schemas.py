"""Request bodies of the OpenAI-compatible endpoints, validated into typed values.

Unknown fields are ignored (clients send extras such as ``user``), but a known field of
the wrong type or out of range is a 400 that names the field.
"""

from __future__ import annotations

from typing import Any

from runtime.engine.context_overflow import POLICIES
from runtime.sampling_params import DEFAULT_TOP_K, SamplingParams
from runtime.server import validation as v
from runtime.server.errors import bad_request
from runtime.server.media_input import MediaInput
from runtime.server.generate.request import GenerationRequest, Message, ToolCall, ToolSpec
from runtime.server.generate.logprobs_api import parse_chat_logprobs, parse_completion_logprobs
from runtime.server.generate.reasoning_options import parse_reasoning
from runtime.server.generate.structured_output import openai_constraint
from runtime.server.generate.tool_checks import OPENAI, ToolList, call_arguments, checked_choice
from runtime.tool_choice import AUTO, NONE, REQUIRED, ToolChoice, function_choice

DEFAULT_TEMPERATURE = 0.8
MAX_N = 16
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_UNSUPPORTED = {"functions": "function calling (use 'tools')", "suffix": "suffix", "best_of": "best_of"}


def _draft(body: dict) -> str | None:
    """Speculative decoding for this request: true / omitted (the server's default), false
    (off), "ngram" (prompt lookup), "model" or the loaded draft model's id."""
    d = body.get("draft")
    if d is None or d is True:
        return None
    if d is False:
        return "off"
    if isinstance(d, str) and d:
        return v.text(d, "draft", max_chars=1024)
    raise bad_request("'draft' must be true, false, \"ngram\", \"model\" or a draft model id", "draft")


def _common(body: Any) -> GenerationRequest:
    body = v.require_object(body)
    for name, what in _UNSUPPORTED.items():
        if body.get(name) not in (None, False, [], ""):
            raise bad_request(f"'{name}' ({what}) is not supported by this server", name)
    model = body.get("model")
    if model is not None:
        model = v.text(model, "model", max_chars=1024)
    n = v.integer(body, "n", 1, MAX_N) or 1
    max_tokens = v.int_option(body, "max_completion_tokens", limit="max_tokens")
    if max_tokens is None:
        max_tokens = v.int_option(body, "max_tokens")
    top_k = v.int_option(body, "top_k")
    params = SamplingParams(
        temperature=v.option(body, "temperature", DEFAULT_TEMPERATURE),
        top_k=DEFAULT_TOP_K if top_k is None else top_k,
        top_p=v.option(body, "top_p", 1.0),
        min_p=v.option(body, "min_p", 0.0),
        repeat_penalty=v.option(body, "repeat_penalty", 1.0),
        presence_penalty=v.option(body, "presence_penalty", 0.0),
        frequency_penalty=v.option(body, "frequency_penalty", 0.0),
        seed=v.int_option(body, "seed"),
        max_tokens=max_tokens,
        stop=v.stop_list(body),
        ignore_eos=v.boolean(body, "ignore_eos"),
        draft=_draft(body),
    )
    stream = v.boolean(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad_request("'stream_options' must be an object", "stream_options")
    include_usage = bool(options and v.boolean(options, "include_usage", prefix="stream_options."))
    req = GenerationRequest(model, params, stream, include_usage, n=n)
    req.constraint, _ = openai_constraint(body)
    return req


def parse_chat(body: Any) -> GenerationRequest:
    req = _common(body)
    media = MediaInput()
    texts = v.messages(body.get("messages"), ROLES, media=media)
    req.messages = chat_messages(body["messages"], texts)
    req.media = media.media
    req.params.logprobs, req.params.top_logprobs = parse_chat_logprobs(body)
    req.tools = chat_tools(body.get("tools"))
    req.tool_choice = checked_choice(OPENAI, chat_tool_choice(body.get("tool_choice")), req.tools, "tool_choice")
    req.parallel_tool_calls = parallel_tool_calls(body)
    req.think, req.reasoning_effort = parse_reasoning(body)
    req.overflow = context_overflow(body)
    return req


def context_overflow(body: dict) -> str | None:
    """Hearth's ``context_overflow``: ``truncate_middle`` or ``rolling_window`` (whole turns left out
    until the conversation fits, ``runtime.engine.context_overflow``), or ``stop`` (the default:
    a conversation longer than the context is refused)."""
    value = body.get("context_overflow")
    if value is None or value == "stop":
        return None
    if value not in POLICIES:
        raise bad_request(f"'context_overflow' must be one of {', '.join(POLICIES)} or stop", "context_overflow")
    return str(value)


def chat_messages(raw: list, texts: list[dict]) -> list[Message]:
    """Chat messages (``raw``, their text already read into ``texts``) with the calls of earlier
    turns (``tool_calls``), tool results' ``tool_call_id`` and ``name`` (Ollama's ``tool_name``)
    and earlier reasoning (``reasoning_content``, Ollama's ``thinking``)."""
    out = []
    for i, (r, t) in enumerate(zip(raw, texts)):
        m = Message(t["role"], t["content"])
        calls = r.get("tool_calls")
        if calls:
            if not isinstance(calls, list):
                raise bad_request(f"'messages[{i}].tool_calls' must be a list", f"messages[{i}].tool_calls")
            m.tool_calls = [_history_call(c, f"messages[{i}].tool_calls[{j}]") for j, c in enumerate(calls)]
        if isinstance(r.get("tool_call_id"), str):
            m.tool_call_id = r["tool_call_id"]
        name = r["tool_name"] if isinstance(r.get("tool_name"), str) else r.get("name")
        if isinstance(name, str):
            m.name = name
        thought = r.get("reasoning_content") or r.get("thinking")
        if isinstance(thought, str):
            m.reasoning = thought
        out.append(m)
    return out


def _history_call(c: Any, where: str) -> ToolCall:
    fn = c.get("function") if isinstance(c, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise bad_request(f"'{where}' must be {{\"type\": \"function\", \"function\": {{\"name\", \"arguments\"}}}}", where)
    arguments = call_arguments(OPENAI, fn.get("arguments", {}), f"{where}.function.arguments")
    call_id = c.get("id")
    return ToolCall(call_id if isinstance(call_id, str) else "", fn["name"], arguments)


def chat_tools(raw: Any) -> list[ToolSpec]:
    """``tools``: OpenAI function tools ``{"type": "function", "function": {"name", "description",
    "parameters"}}`` (Ollama sends the same)."""
    if raw is None or raw == []:
        return []
    if not isinstance(raw, list):
        raise bad_request("'tools' must be a list of function tools", "tools")
    tools = ToolList(OPENAI, len(raw))
    for i, t in enumerate(raw):
        where = f"tools[{i}]"
        if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(t.get("function"), dict):
            raise bad_request(f"'{where}' must be {{\"type\": \"function\", \"function\": {{...}}}}", where)
        fn = t["function"]
        tools.add(fn.get("name"), fn.get("description"), fn.get("parameters"), f"{where}.function")
    return tools.tools


_CHOICES = {"auto": AUTO, "none": NONE, "required": REQUIRED}


def chat_tool_choice(value: Any) -> ToolChoice | None:
    """``tool_choice``: "auto", "none", "required" or ``{"type": "function", "function": {"name"}}``
    (None: not given)."""
    if value is None:
        return None
    if isinstance(value, str) and value in _CHOICES:
        return _CHOICES[value]
    fn = value.get("function") if isinstance(value, dict) and value.get("type") == "function" else None
    if isinstance(fn, dict) and isinstance(fn.get("name"), str):
        return function_choice(fn["name"])
    raise bad_request("'tool_choice' must be \"none\", \"auto\", \"required\" or "
                      "{\"type\": \"function\", \"function\": {\"name\": ...}}", "tool_choice")


def parallel_tool_calls(body: dict) -> bool:
    value = body.get("parallel_tool_calls")
    if value is not None and not isinstance(value, bool):
        raise bad_request("'parallel_tool_calls' must be true or false", "parallel_tool_calls")
    return value is not False


def parse_completion(body: Any) -> GenerationRequest:
    req = _common(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        req.prompt = v.text(prompt, "prompt", empty=False)
    elif isinstance(prompt, list) and prompt and type(prompt[0]) is int:  # token_ids checks them all
        req.tokens = v.token_ids(prompt, "prompt")  # the vocabulary is checked once the model is known
    else:
        raise bad_request("'prompt' must be a non-empty string, a list of one string, or a list of token ids", "prompt")
    req.echo = v.boolean(body, "echo")
    n_top = parse_completion_logprobs(body)
    if n_top is not None:
        req.params.logprobs, req.params.top_logprobs, req.params.prompt_logprobs = True, n_top, req.echo
    return req
