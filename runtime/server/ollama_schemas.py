"""Request bodies of the Ollama-compatible endpoints, validated into ``GenerationRequest``.

Ollama's names map onto the engine's sampling parameters: ``options.num_predict`` is
``max_tokens`` (negative: until the context ends; 0 is one token), ``options.repeat_last_n`` is the penalty
window, and so on. Options Ollama knows but that do not apply to a running Hearth model
(``num_gpu``, ``use_mmap``, ...) are ignored as Ollama ignores unknown ones; an option of the
wrong type is a 400 that names it. Features Hearth does not have (images, suffix) are refused
with a clear message instead of being silently dropped. ``format``, ``tools`` and ``think`` are
read by ``structured_output`` and ``tool_calls``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runtime.engine.sampling_params import DEFAULT_TOP_K, SamplingParams
from runtime.server.errors import bad_request
from runtime.server.keep_alive import parse_keep_alive
from runtime.server.schemas import DEFAULT_TEMPERATURE, GenerationRequest
from runtime.server.structured_output import ollama_constraint
from runtime.server.tool_calls import apply_tools, parse_reasoning

ROLES = {"system", "user", "assistant", "tool"}


def _opt_number(options: dict, name: str, default: float, lo: float, hi: float) -> float:
    v = options.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        raise bad_request(f"'options.{name}' must be a number", f"options.{name}")
    if not lo <= v <= hi:
        raise bad_request(f"'options.{name}' must be between {lo} and {hi}, got {v}", f"options.{name}")
    return float(v)


def _opt_int(options: dict, name: str, lo: int, hi: int) -> int | None:
    v = options.get(name)
    if v is None:
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise bad_request(f"'options.{name}' must be an integer", f"options.{name}")
    if not lo <= v <= hi:
        raise bad_request(f"'options.{name}' must be between {lo} and {hi}, got {v}", f"options.{name}")
    return v


def _stop(options: dict) -> list[str]:
    v = options.get("stop")
    if v is None:
        return []
    if isinstance(v, str):
        return [v] if v else []
    if isinstance(v, list) and len(v) <= 16 and all(isinstance(s, str) for s in v):
        return [s for s in v if s]
    raise bad_request("'options.stop' must be a string or a list of at most 16 strings", "options.stop")


def sampling_from_options(options: Any) -> SamplingParams:
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise bad_request("'options' must be an object", "options")
    num_predict = _opt_int(options, "num_predict", -2, 2**31 - 1)
    # The context window is the service's (--ctx, shared by the requests decoded together):
    # num_ctx is checked and accepted, and a reply is bounded by that window.
    _opt_int(options, "num_ctx", 1, 2**31 - 1)
    max_tokens = None if num_predict is None or num_predict < 0 else max(1, num_predict)
    top_k = _opt_int(options, "top_k", 0, 2**31 - 1)
    return SamplingParams(
        temperature=_opt_number(options, "temperature", DEFAULT_TEMPERATURE, 0.0, 2.0),
        top_k=DEFAULT_TOP_K if top_k is None else top_k,
        top_p=_opt_number(options, "top_p", 1.0, 0.0, 1.0),
        min_p=_opt_number(options, "min_p", 0.0, 0.0, 1.0),
        repeat_penalty=_opt_number(options, "repeat_penalty", 1.0, 0.01, 10.0),
        presence_penalty=_opt_number(options, "presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=_opt_number(options, "frequency_penalty", 0.0, -2.0, 2.0),
        penalty_last_n=max(0, _opt_int(options, "repeat_last_n", -1, 2**31 - 1) or 64),
        seed=_opt_int(options, "seed", -(2**63), 2**64 - 1),
        max_tokens=max_tokens,
        stop=_stop(options),
    )


@dataclass(slots=True)
class OllamaRequest:
    """A parsed /api/chat or /api/generate body. ``gen`` is None for a load/unload-only call."""

    name: str  # the model as the client named it (echoed back)
    gen: GenerationRequest | None
    keep_alive: float | None


def model_name(body: Any) -> str:
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model.strip():
        raise bad_request("'model' is required: a model name such as \"smollm2-135m\"", "model")
    return model


def engine_model(name: str) -> str:
    """Ollama clients add a tag (``:latest``); Hearth's ids have none."""
    return name[: -len(":latest")] if name.endswith(":latest") else name


def _refuse_unsupported(body: dict) -> None:
    if body.get("images"):
        raise bad_request("'images': the models served here take text only", "images")
    if body.get("suffix"):
        raise bad_request("'suffix' (fill-in-the-middle) is not supported by this server", "suffix")
    if body.get("context"):
        raise bad_request("'context' is not supported: send the conversation to /api/chat", "context")
    if body.get("template"):
        raise bad_request("'template' is not supported: the model's own chat template is used", "template")
    if body.get("logprobs"):
        raise bad_request("'logprobs' is not supported by this server", "logprobs")


def _stream(body: dict) -> bool:
    v = body.get("stream", True)
    if v is None:
        return True
    if not isinstance(v, bool):
        raise bad_request("'stream' must be true or false", "stream")
    return v


def _messages(raw: Any) -> list[dict]:
    if not isinstance(raw, list):
        raise bad_request("'messages' must be a list", "messages")
    out = []
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or m["role"] not in ROLES:
            raise bad_request(f"messages[{i}] must be an object with a role of {sorted(ROLES)}", f"messages[{i}].role")
        content = m.get("content")
        if content is not None and not isinstance(content, str):
            raise bad_request(f"messages[{i}].content must be a string", f"messages[{i}].content")
        if m.get("images"):
            raise bad_request(f"messages[{i}].images: the models served here take text only", f"messages[{i}].images")
        out.append({"role": m["role"], "content": content or ""})
    return out


def parse_ollama_chat(body: Any) -> OllamaRequest:
    name = model_name(body)
    _refuse_unsupported(body)
    keep_alive = parse_keep_alive(body.get("keep_alive"))
    stream = _stream(body)
    params = sampling_from_options(body.get("options"))
    messages = _messages(body.get("messages") if body.get("messages") is not None else [])
    if not messages:
        return OllamaRequest(name, None, keep_alive)
    gen = GenerationRequest(engine_model(name), params, stream, messages=messages, keep_alive=keep_alive,
                            extra={"max_tokens_param": "options.num_predict"})
    gen.constraint, gen.schema = ollama_constraint(body)
    # Ollama has no tool_choice; Hearth reads one from the body or from options (which the
    # official clients pass through): "required" or a function name forces a call
    choice = body.get("tool_choice", (body.get("options") or {}).get("tool_choice"))
    if isinstance(choice, str) and choice not in ("auto", "none", "required"):
        choice = {"type": "function", "function": {"name": choice}}
    apply_tools(gen, {**body, "tool_choice": choice}, body.get("messages"))
    return OllamaRequest(name, gen, keep_alive)


def parse_ollama_generate(body: Any) -> OllamaRequest:
    name = model_name(body)
    _refuse_unsupported(body)
    keep_alive = parse_keep_alive(body.get("keep_alive"))
    stream = _stream(body)
    params = sampling_from_options(body.get("options"))
    prompt, system, raw = body.get("prompt"), body.get("system"), body.get("raw", False)
    if prompt is not None and not isinstance(prompt, str):
        raise bad_request("'prompt' must be a string", "prompt")
    if system is not None and not isinstance(system, str):
        raise bad_request("'system' must be a string", "system")
    if raw is not None and not isinstance(raw, bool):
        raise bad_request("'raw' must be true or false", "raw")
    if not prompt:
        return OllamaRequest(name, None, keep_alive)
    gen = GenerationRequest(engine_model(name), params, stream, keep_alive=keep_alive,
                            extra={"max_tokens_param": "options.num_predict"})
    gen.constraint, gen.schema = ollama_constraint(body)
    gen.think, gen.reasoning_effort = parse_reasoning(body)
    if raw:
        gen.prompt = prompt  # no template: the client sends the model's own format
    else:
        gen.messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": prompt}]
    return OllamaRequest(name, gen, keep_alive)
