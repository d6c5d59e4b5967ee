"""Request bodies of the Ollama-compatible endpoints, validated into ``GenerationRequest``.

Ollama's names map onto the engine's sampling parameters: ``options.num_predict`` is
``max_tokens`` (negative: until the context ends; 0 is one token), ``options.repeat_last_n`` is the penalty
window, and so on. Options Ollama knows but that do not apply to a running Hearth model
(``num_gpu``, ``use_mmap``, ...) are ignored as Ollama ignores unknown ones; an option of the
wrong type is a 400 that names it. ``images`` (base64, per message or beside ``prompt``) go
before the message's text, for a model with a projector (``runtime.server.media_input``).
Features Hearth does not have (suffix, context) are refused with a clear message instead of
being silently dropped. ``format`` is read by ``structured_output``; ``tools`` and the messages'
``tool_calls`` are OpenAI chat's (``wire.openai.schemas``), and ``think`` is a switch or an effort.
Ollama has no ``tool_choice``: Hearth reads one from the body or from ``options`` (which the
official clients pass through): "required" or a function's name forces a call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runtime.sampling_params import DEFAULT_TOP_K, LIMITS, SamplingParams
from runtime.server import validation as v
from runtime.server.errors import bad_request
from runtime.server.media_input import MediaInput
from runtime.server.models.keep_alive import parse_keep_alive
from runtime.server.generate.logprobs_api import parse_chat_logprobs
from runtime.server.generate.reasoning_options import parse_reasoning
from runtime.server.generate.request import GenerationRequest, Message
from runtime.server.generate.structured_output import ollama_constraint
from runtime.server.generate.tool_checks import OPENAI, checked_choice
from runtime.server.wire.openai.schemas import (
    DEFAULT_TEMPERATURE, chat_messages, chat_tool_choice, chat_tools, parallel_tool_calls,
)
from runtime.tool_choice import ToolChoice, function_choice

ROLES = frozenset({"system", "user", "assistant", "tool"})


OPTIONS = "options."
#: options Ollama knows that do not apply to a running Hearth model: checked (type and range,
#: so nothing absurd is accepted silently) and then ignored. name -> (lowest, highest)
IGNORED_INT_OPTIONS: dict[str, tuple[int, int]] = {
    "num_ctx": (1, 1 << 20), "num_batch": (1, 1 << 16), "num_keep": (-1, 1 << 20), "num_thread": (0, 1024),
    "num_gpu": (-1, 1 << 16), "main_gpu": (0, 256), "mirostat": (0, 2),
}
IGNORED_FLOAT_OPTIONS: dict[str, tuple[float, float]] = {
    "typical_p": (0.0, 1.0), "tfs_z": (0.0, 100.0), "mirostat_tau": (0.0, 100.0), "mirostat_eta": (0.0, 1.0),
}
IGNORED_BOOL_OPTIONS = ("penalize_newline", "numa", "low_vram", "f16_kv", "vocab_only", "use_mmap", "use_mlock")
#: ``repeat_last_n`` when absent, and its -1 ("the whole context", bounded by the engine's range)
DEFAULT_REPEAT_LAST_N = 64


def _repeat_last_n(options: dict) -> int:
    lo, hi = LIMITS["penalty_last_n"]
    n = v.integer(options, "repeat_last_n", -1, int(hi), OPTIONS, whole_floats=True)
    if n is None:
        return DEFAULT_REPEAT_LAST_N
    return int(hi) if n == -1 else n  # the engine bounds the window by the request's own length


def sampling_from_options(options: Any) -> SamplingParams:
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise bad_request("'options' must be an object", "options")
    num_predict = v.integer(options, "num_predict", -2, int(LIMITS["max_tokens"][1]), OPTIONS, whole_floats=True)
    # num_ctx is applied by the router (see num_ctx()); the other options above are checked,
    # accepted and ignored.
    for name, (lo, hi) in IGNORED_INT_OPTIONS.items():
        v.integer(options, name, lo, hi, OPTIONS, whole_floats=True)
    for name, (flo, fhi) in IGNORED_FLOAT_OPTIONS.items():
        v.number(options, name, 0.0, flo, fhi, OPTIONS)
    for name in IGNORED_BOOL_OPTIONS:
        v.boolean(options, name, prefix=OPTIONS)
    max_tokens = None if num_predict is None or num_predict < 0 else max(1, num_predict)
    top_k = v.int_option(options, "top_k", OPTIONS, whole_floats=True)
    return SamplingParams(
        temperature=v.option(options, "temperature", DEFAULT_TEMPERATURE, OPTIONS),
        top_k=DEFAULT_TOP_K if top_k is None else top_k,
        top_p=v.option(options, "top_p", 1.0, OPTIONS),
        min_p=v.option(options, "min_p", 0.0, OPTIONS),
        repeat_penalty=v.option(options, "repeat_penalty", 1.0, OPTIONS),
        presence_penalty=v.option(options, "presence_penalty", 0.0, OPTIONS),
        frequency_penalty=v.option(options, "frequency_penalty", 0.0, OPTIONS),
        penalty_last_n=_repeat_last_n(options),
        seed=v.int_option(options, "seed", OPTIONS, whole_floats=True),
        max_tokens=max_tokens,
        stop=v.stop_list(options, prefix=OPTIONS),
    )


def num_ctx(options: Any) -> int | None:
    """``options.num_ctx``: the context the model is loaded with (another value loads, or
    reuses, an engine of that model at that context). Checked by ``sampling_from_options``."""
    value = options.get("num_ctx") if isinstance(options, dict) else None
    return None if value is None else int(value)  # a whole float (4096.0) was accepted too


@dataclass(slots=True)
class OllamaRequest:
    """A parsed /api/chat or /api/generate body. ``gen`` is None for a load/unload-only call."""

    name: str  # the model as the client named it (echoed back)
    gen: GenerationRequest | None
    keep_alive: float | None
    num_ctx: int | None = None


def model_name(body: Any) -> str:
    """The body's ``model``, or its older name ``name`` (which Ollama still takes on show, pull,
    delete and copy, and which litellm sends)."""
    body = v.require_object(body)
    model = body.get("model")
    if model is None:
        model = body.get("name")
    if not isinstance(model, str) or not model.strip():
        raise bad_request("'model' is required: a model name such as \"smollm2-135m\"", "model")
    return v.text(model, "model", max_chars=1024)


def engine_model(name: str) -> str:
    """Ollama clients add a tag (``:latest``); Hearth's ids have none."""
    return name[: -len(":latest")] if name.endswith(":latest") else name


def _refuse_unsupported(body: dict) -> None:
    if body.get("suffix"):
        raise bad_request("'suffix' (fill-in-the-middle) is not supported by this server", "suffix")
    if body.get("context"):
        raise bad_request("'context' is not supported: send the conversation to /api/chat", "context")
    if body.get("template"):
        raise bad_request("'template' is not supported: the model's own chat template is used", "template")


def _stream(body: dict) -> bool:
    return v.boolean(body, "stream", default=True)


def _images(raw: Any, where: str, media: MediaInput) -> str:
    """Ollama's ``images`` (a list of base64 strings): their markers, which go before the text. A WAV
    file among them is heard (Ollama's API has no other place for sound)."""
    if raw is None or raw == []:
        return ""
    if not isinstance(raw, list):
        raise bad_request(f"'{where}' must be a list of base64-encoded images", where)
    return "".join(media.sniffed(b, f"{where}[{j}]") for j, b in enumerate(raw))


def _messages(raw: Any, media: MediaInput) -> list[Message]:
    texts = v.messages(raw, ROLES, parts=False, empty=True)
    for i, m in enumerate(texts):  # v.messages checked ``raw`` is a list of objects
        markers = _images(raw[i].get("images"), f"messages[{i}].images", media)
        if markers:
            m["content"] = markers + m["content"]
    return chat_messages(raw, texts)


def _tool_choice(body: dict) -> ToolChoice | None:
    """Hearth's ``tool_choice`` (Ollama has none), from the body or ``options``: OpenAI's, or a
    function's name."""
    options = body.get("options")
    value = body.get("tool_choice", options.get("tool_choice") if isinstance(options, dict) else None)
    if isinstance(value, str) and value not in ("auto", "none", "required"):
        return function_choice(value)
    return chat_tool_choice(value)


def parse_ollama_chat(body: Any) -> OllamaRequest:
    name = model_name(body)
    _refuse_unsupported(body)
    keep_alive = parse_keep_alive(body.get("keep_alive"))
    stream = _stream(body)
    params = sampling_from_options(body.get("options"))
    params.logprobs, params.top_logprobs = parse_chat_logprobs(body)
    media = MediaInput()
    messages = _messages(body.get("messages") if body.get("messages") is not None else [], media)
    ctx = num_ctx(body.get("options"))
    if not messages:
        return OllamaRequest(name, None, keep_alive, ctx)
    gen = GenerationRequest(engine_model(name), params, stream, messages=messages, keep_alive=keep_alive,
                            num_ctx=ctx, media=media.media)
    gen.constraint, _ = ollama_constraint(body)
    gen.tools = chat_tools(body.get("tools"))
    gen.tool_choice = checked_choice(OPENAI, _tool_choice(body), gen.tools, "tool_choice")
    gen.parallel_tool_calls = parallel_tool_calls(body)
    gen.think, gen.reasoning_effort = parse_reasoning(body)
    return OllamaRequest(name, gen, keep_alive, ctx)


def parse_ollama_generate(body: Any) -> OllamaRequest:
    name = model_name(body)
    _refuse_unsupported(body)
    keep_alive = parse_keep_alive(body.get("keep_alive"))
    stream = _stream(body)
    params = sampling_from_options(body.get("options"))
    params.logprobs, params.top_logprobs = parse_chat_logprobs(body)
    prompt, system = v.optional_text(body, "prompt"), v.optional_text(body, "system")
    raw = v.boolean(body, "raw")
    ctx = num_ctx(body.get("options"))
    if not prompt:
        return OllamaRequest(name, None, keep_alive, ctx)
    gen = GenerationRequest(engine_model(name), params, stream, keep_alive=keep_alive,
                            num_ctx=ctx)
    gen.constraint, _ = ollama_constraint(body)
    gen.think, gen.reasoning_effort = parse_reasoning(body)
    media = MediaInput()
    images = _images(body.get("images"), "images", media)
    if raw and images:
        raise bad_request("'images' need the model's template: leave out 'raw'", "images")
    if raw:
        gen.prompt = prompt  # no template: the client sends the model's own format
    else:
        gen.messages = ([Message("system", system)] if system else []) + [Message("user", images + prompt)]
        gen.media = media.media
    return OllamaRequest(name, gen, keep_alive, ctx)
