"""Request bodies of the OpenAI-compatible endpoints, validated into typed values.

Unknown fields are ignored (clients send extras such as ``user``), but a known field of
the wrong type or out of range is a 400 that names the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runtime.engine.sampling_params import DEFAULT_TOP_K, SamplingParams
from runtime.server.errors import bad_request
from runtime.server.structured_output import openai_constraint
from runtime.server.tool_calls import apply_tools

DEFAULT_TEMPERATURE = 0.8
MAX_N = 16
_ROLES = {"system", "developer", "user", "assistant", "tool"}
_UNSUPPORTED = {"functions": "function calling (use 'tools')", "logprobs": "logprobs",
                "top_logprobs": "logprobs", "suffix": "suffix", "best_of": "best_of"}


@dataclass(slots=True)
class GenerationRequest:
    model: str | None
    params: SamplingParams
    stream: bool = False
    include_usage: bool = False
    messages: list[dict] | None = None
    prompt: str | None = None
    tokens: list[int] | None = None
    echo: bool = False
    n: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    keep_alive: float | None = None  # seconds; None: the service default
    #: constrained decoding (``runtime.engine.constraint.ConstraintSpec``), None: free text
    constraint: Any = None
    #: the JSON schema a structured reply follows (None: not JSON)
    schema: dict | None = None
    #: OpenAI function tools ``[{"type": "function", "function": {...}}]`` and tool_choice
    tools: list[dict] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool = True
    #: reasoning: None (the template's default), True / False; effort "low" / "medium" / "high"
    think: bool | None = None
    reasoning_effort: str | None = None


def _number(body: dict, name: str, default: float, lo: float, hi: float) -> float:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise bad_request(f"'{name}' must be a number", name)
    if not lo <= v <= hi:
        raise bad_request(f"'{name}' must be between {lo} and {hi}, got {v}", name)
    return float(v)


def _integer(body: dict, name: str, lo: int, hi: int | None = None) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad_request(f"'{name}' must be an integer", name)
    if v < lo or (hi is not None and v > hi):
        raise bad_request(f"'{name}' must be an integer >= {lo}" + (f" and <= {hi}" if hi is not None else "") + f", got {v}", name)
    return v


def _boolean(body: dict, name: str) -> bool:
    v = body.get(name, False)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise bad_request(f"'{name}' must be true or false", name)
    return v


def _stop(body: dict) -> list[str]:
    v = body.get("stop")
    if v is None:
        return []
    if isinstance(v, str):
        return [v]
    if isinstance(v, list) and all(isinstance(s, str) for s in v) and len(v) <= 16:
        return [s for s in v if s]
    raise bad_request("'stop' must be a string or a list of at most 16 strings", "stop")


def _draft(body: dict) -> str | None:
    """Speculative decoding for this request: true / omitted (the server's default), false
    (off), "ngram" (prompt lookup), "model" or the loaded draft model's id."""
    v = body.get("draft")
    if v is None or v is True:
        return None
    if v is False:
        return "off"
    if isinstance(v, str) and v:
        return v
    raise bad_request("'draft' must be true, false, \"ngram\", \"model\" or a draft model id", "draft")


def _common(body: Any) -> GenerationRequest:
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    for name, what in _UNSUPPORTED.items():
        if body.get(name) not in (None, False, [], ""):
            raise bad_request(f"'{name}' ({what}) is not supported by this server", name)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_request("'model' must be a string", "model")
    n = _integer(body, "n", 1, MAX_N) or 1
    max_tokens = _integer(body, "max_completion_tokens", 1)
    if max_tokens is None:
        max_tokens = _integer(body, "max_tokens", 1)
    seed = _integer(body, "seed", -(2**63), 2**64 - 1)
    params = SamplingParams(
        temperature=_number(body, "temperature", DEFAULT_TEMPERATURE, 0.0, 2.0),
        top_k=int(_integer(body, "top_k", 0) if body.get("top_k") is not None else DEFAULT_TOP_K),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0),
        min_p=_number(body, "min_p", 0.0, 0.0, 1.0),
        repeat_penalty=_number(body, "repeat_penalty", 1.0, 0.01, 10.0),
        presence_penalty=_number(body, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=_number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        seed=seed,
        max_tokens=max_tokens,
        stop=_stop(body),
        ignore_eos=_boolean(body, "ignore_eos"),
        draft=_draft(body),
    )
    stream = _boolean(body, "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise bad_request("'stream_options' must be an object", "stream_options")
    include_usage = bool(options and _boolean(options, "include_usage"))
    req = GenerationRequest(model, params, stream, include_usage, n=n)
    req.constraint, req.schema = openai_constraint(body)
    return req


def parse_chat(body: Any) -> GenerationRequest:
    req = _common(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or m["role"] not in _ROLES:
            raise bad_request(f"messages[{i}] must be an object with a role of {sorted(_ROLES)}", f"messages[{i}].role")
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise bad_request(f"messages[{i}].content must be a string or a list of parts", f"messages[{i}].content")
    req.messages = [{"role": m["role"], "content": m.get("content") or ""} for m in messages]
    apply_tools(req, body, messages)
    return req


def parse_completion(body: Any) -> GenerationRequest:
    req = _common(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise bad_request("'prompt' must not be empty", "prompt")
        req.prompt = prompt
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        req.tokens = prompt
    else:
        raise bad_request("'prompt' must be a non-empty string, a list of one string, or a list of token ids", "prompt")
    req.echo = _boolean(body, "echo")
    return req
