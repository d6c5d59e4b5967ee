"""``GET /openapi.json``: an OpenAPI 3.1 description of every route, with this service's limits.

``OPERATIONS`` holds one entry per (method, path); a test compares it with the live router,
so a route added without a description fails the suite. Errors are described once per API:
OpenAI's object everywhere, Ollama's string under /api/.
"""

from __future__ import annotations

from aiohttp import web

from runtime import __version__
from runtime.sampling_params import LIMITS, MAX_STOP_CHARS, MAX_STOPS
from runtime.server.wire.openai import embeddings_openapi
from runtime.server.app_keys import CONFIG
from runtime.server.wire.responses.responses_schemas import EFFORTS

OBJ = {"type": "object"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
INT = {"type": "integer"}
NUM = {"type": "number"}


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _range(name: str, kind: dict = NUM) -> dict:
    lo, hi = LIMITS[name]
    return {**kind, "minimum": lo, "maximum": hi}


NAME = {**STR, "pattern": "^[A-Za-z0-9_.\\-]{1,64}$"}
EFFORT = {"enum": ["none", "minimal", "low", "medium", "high"]}


def _tool_fields() -> tuple[dict, dict]:
    """Tool calling, structured output and reasoning: the chat API's fields, and Ollama's."""
    fn = {"type": "object", "required": ["name"], "properties": {"name": NAME, "description": STR, "parameters": OBJ}}
    tools = {"type": "array", "maxItems": 8, "items": {"type": "object", "required": ["type", "function"],
                                                       "properties": {"type": {"const": "function"}, "function": fn}}}
    named = {"type": "object", "required": ["type", "function"], "properties": {
        "type": {"const": "function"}, "function": {"type": "object", "required": ["name"], "properties": {"name": NAME}}}}
    response_format = {"type": "object", "required": ["type"], "properties": {
        "type": {"enum": ["text", "json_object", "json_schema"]},
        "json_schema": {"type": "object", "properties": {"name": STR, "schema": OBJ, "strict": BOOL}}}}
    chat = {"tools": tools, "tool_choice": {"oneOf": [{"enum": ["auto", "none", "required"]}, named]},
            "parallel_tool_calls": BOOL, "response_format": response_format, "reasoning_effort": EFFORT,
            "enable_thinking": BOOL, "context_overflow": {"enum": ["stop", "truncate_middle", "rolling_window"]}}
    ollama = {"tools": tools, "format": {"oneOf": [{"const": "json"}, OBJ]},
              "think": {"oneOf": [BOOL, {"enum": ["low", "medium", "high"]}]}}
    return chat, ollama


def _schemas(max_tokens: int) -> dict:
    from runtime.server.wire.ollama.ollama_schemas import IGNORED_INT_OPTIONS

    text = {**STR, "maxLength": MAX_STOP_CHARS}
    stop = {"oneOf": [text, {"type": "array", "items": text, "maxItems": MAX_STOPS}]}
    seed = _range("seed", INT)
    sampling = {
        "model": STR, "temperature": _range("temperature"), "top_p": _range("top_p"),
        "top_k": _range("top_k", INT), "min_p": _range("min_p"),
        "presence_penalty": _range("presence_penalty"), "frequency_penalty": _range("frequency_penalty"),
        "repeat_penalty": _range("repeat_penalty"), "seed": seed, "stop": stop,
        "max_tokens": {**INT, "minimum": 1, "maximum": max_tokens, "examples": [8]},
        "max_completion_tokens": {**INT, "minimum": 1, "maximum": max_tokens},
        "n": {**INT, "minimum": 1, "maximum": 16}, "stream": BOOL, "ignore_eos": BOOL,
        "stream_options": {"type": "object", "properties": {"include_usage": BOOL}},
    }
    options = {"type": "object", "properties": {
        "temperature": _range("temperature"), "top_k": _range("top_k", INT),
        "top_p": _range("top_p"), "min_p": _range("min_p"),
        "presence_penalty": _range("presence_penalty"), "frequency_penalty": _range("frequency_penalty"),
        "num_predict": {**INT, "minimum": -2, "maximum": max_tokens, "examples": [8]},
        **{k: {**INT, "minimum": lo, "maximum": hi} for k, (lo, hi) in IGNORED_INT_OPTIONS.items()},
        "seed": seed, "stop": stop, "repeat_penalty": _range("repeat_penalty"),
        "repeat_last_n": {**INT, "minimum": -1, "maximum": LIMITS["penalty_last_n"][1]}}}
    top = {**INT, "minimum": 0, "maximum": 20}
    chat_tools, ollama_tools = _tool_fields()
    chat_lp = {"logprobs": BOOL, "top_logprobs": {**top, "description": "needs logprobs: true"}}
    keep_alive = {"oneOf": [NUM, STR], "description": "seconds, or a duration such as \"5m\"; negative: forever; 0: unload"}
    ollama_msg = {"type": "object", "required": ["role"], "properties": {
        "role": {"enum": ["system", "user", "assistant", "tool"]}, "content": STR}}
    timing = {k: INT for k in ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration",
                               "eval_count", "eval_duration")}
    details = {"type": "object", "properties": {"format": STR, "family": STR, "parameter_size": STR,
                                                "quantization_level": STR}}
    return {
        "OpenAIError": {"type": "object", "required": ["error"], "properties": {"error": {
            "type": "object", "required": ["message", "type", "param", "code"], "properties": {
                "message": STR, "type": STR, "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]}}}}},
        "OllamaError": {"type": "object", "required": ["error"], "properties": {"error": STR}},
        "ChatCompletionRequest": {"type": "object", "required": ["messages"], "properties": {
            **sampling, **chat_lp, **chat_tools, "messages": {"type": "array", "minItems": 1, "items": {
                "type": "object", "required": ["role"], "properties": {
                    "role": {"enum": ["system", "developer", "user", "assistant", "tool"]}, "content": STR}}}},
            "examples": [{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}]},
        "CompletionRequest": {"type": "object", "required": ["prompt"], "properties": {
            **sampling, "echo": BOOL, "logprobs": {**top, "description": "alternatives per token; with echo, "
                                                   "the prompt's logprobs too"}, "prompt": {"oneOf": [{**STR, "minLength": 1},
                                                          {"type": "array", "minItems": 1, "items": INT}]}},
            "examples": [{"prompt": "1, 2, 3,", "max_tokens": 8}]},
        "ChatCompletion": {"type": "object", "required": ["id", "object", "choices"], "properties": {
            "id": STR, "object": STR, "model": STR, "choices": {"type": "array"}, "usage": OBJ}},
        "ModelList": {"type": "object", "required": ["data"], "properties": {"object": STR, "data": {
            "type": "array", "items": {"type": "object", "required": ["id", "loaded", "capabilities"], "properties": {
                "id": STR, "object": STR, "owned_by": STR, "name": STR, "loaded": BOOL,
                "engine": {"enum": ["remote"], "description": "set on a model another machine serves"},
                "remote": {"type": "object", "description": "a remote model: its prompts go to this upstream",
                           "properties": {"upstream": STR, "host": STR, "url": STR, "model": STR, "health": STR}},
                "context_length": {"type": ["integer", "null"]},
                "capabilities": {"type": "array", "items": {"enum": ["chat", "completion", "embedding", "rerank",
                                                                     "tools", "reasoning", "vision"]}},
                "memory": {"type": "object", "description": "for a loaded model: planned bytes per device and "
                                                            "the worker's resident set"}}}}}},
        "ModelLoadRequest": {"type": "object", "properties": {
            "pin": {**BOOL, "description": "never unload it to make room nor by keep-alive"},
            "ctx": {**INT, "minimum": 1, "description": "context to load it with (default --ctx)"},
            "keep_alive": keep_alive}, "examples": [{"pin": True}]},
        "OllamaOptions": options,
        "OllamaChatRequest": {"type": "object", "required": ["model"], "properties": {
            "model": {**STR, "minLength": 1}, "messages": {"type": "array", "items": ollama_msg}, "stream": BOOL, **chat_lp,
            **ollama_tools,
            "options": _ref("OllamaOptions"), "keep_alive": keep_alive},
            "examples": [{"model": "smollm2-135m", "messages": [{"role": "user", "content": "Hi"}],
                          "stream": False, "options": {"num_predict": 8}}]},
        "OllamaGenerateRequest": {"type": "object", "required": ["model"], "properties": {
            "model": {**STR, "minLength": 1}, "prompt": STR, "system": STR, "raw": BOOL, "stream": BOOL, **chat_lp,
            "format": ollama_tools["format"], "think": ollama_tools["think"],
            "options": _ref("OllamaOptions"), "keep_alive": keep_alive},
            "examples": [{"model": "smollm2-135m", "prompt": "Hi", "stream": False, "options": {"num_predict": 8}}]},
        "OllamaChatResponse": {"type": "object", "required": ["model", "created_at", "message", "done"], "properties": {
            "model": STR, "created_at": STR, "message": ollama_msg, "done": BOOL, "done_reason": STR, **timing}},
        "OllamaGenerateResponse": {"type": "object", "required": ["model", "created_at", "response", "done"],
                                   "properties": {"model": STR, "created_at": STR, "response": STR, "done": BOOL,
                                                  "done_reason": STR, **timing}},
        "OllamaModelRequest": {"type": "object", "required": ["model"], "properties": {
            "model": {**STR, "minLength": 1}}, "examples": [{"model": "smollm2-135m"}]},
        "OllamaPullRequest": {"type": "object", "required": ["model"], "properties": {
            "model": {**STR, "minLength": 1}, "stream": BOOL, "insecure": BOOL}},
        "StoreModelRequest": {"type": "object", "required": ["model"], "properties": {"model": {**STR, "minLength": 1}}},
        "ModelTemplateRequest": {"type": "object", "required": ["template"],
                                 "properties": {"template": {**STR, "minLength": 1}}},
        "ModelTemplate": {"type": "object", "required": ["id", "template", "origin", "bos", "eos", "contract"],
                          "properties": {"id": STR, "template": {"type": ["string", "null"]},
                                         "origin": {"enum": ["model", "stored", "file"]}, "bos": STR, "eos": STR,
                                         "contract": {"type": ["object", "null"]},
                                         "unloaded": {"type": "array", "items": STR}, "removed": BOOL}},
        "LoadSettings": {"type": "object", "additionalProperties": False, "properties": {
            "ctx": {"type": ["integer", "null"], "minimum": 256, "maximum": 1 << 22},
            "gpu_layers": {"type": ["integer", "null"], "minimum": 0, "maximum": 1000},
            "kv_type": {"enum": ["f16", "q8_0", "q4_0", None]}},
            "examples": [{"ctx": 32768, "gpu_layers": None, "kv_type": "q8_0"}]},
        "ModelLoadSettings": {"type": "object", "required": ["id", "settings", "loaded"], "properties": {
            "id": STR, "settings": _ref("LoadSettings"),
            "loaded": {"type": ["object", "null"], "description": "what the loaded model was loaded with"},
            "unloaded": {"type": "array", "items": STR}, "removed": BOOL}},
        "StorePathRequest": {"type": "object", "required": ["path"], "properties": {"path": {**STR, "minLength": 1}}},
        "QuantizeRequest": {"type": "object", "required": ["model", "to"], "properties": {
            "model": {**STR, "minLength": 1, "description": "a local model's id"},
            "to": {**STR, "minLength": 1, "maxLength": 32,
                   "description": "a file size (90MB), bits per weight (4.5bpw) or a llama.cpp mix (Q4_K_M)"},
            "compare": {"type": "boolean", "description": "also make and measure llama.cpp's stock mix (default true)"}}},
        "RemoteAddRequest": {"type": "object", "required": ["name", "url"], "properties": {
            "name": {**STR, "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"}, "url": {**STR, "minLength": 1},
            "api_key": {**STR, "minLength": 1}, "key_env": {**STR, "pattern": "^[A-Za-z_][A-Za-z0-9_]{0,127}$"},
            "allow_insecure": {"type": "boolean"}, "plain_names": {"type": "boolean"},
            "timeouts": {"type": "object", "properties": {
                k: {"type": "number", "exclusiveMinimum": 0} for k in ("connect", "first_byte", "idle")}}}},
        "OllamaProgress": {"type": "object", "required": ["status"], "properties": {
            "status": STR, "digest": STR, "total": INT, "completed": INT}},
        "OllamaTags": {"type": "object", "required": ["models"], "properties": {"models": {"type": "array", "items": {
            "type": "object", "required": ["name", "model", "size", "digest", "details"], "properties": {
                "name": STR, "model": STR, "modified_at": STR, "size": INT, "digest": STR, "details": details}}}}},
        "OllamaShow": {"type": "object", "required": ["details", "model_info"], "properties": {
            "modelfile": STR, "parameters": STR, "template": STR, "details": details, "model_info": OBJ,
            "capabilities": {"type": "array", "items": STR}}},
        "OllamaPs": {"type": "object", "required": ["models"], "properties": {"models": {"type": "array"}}},
        **_wire_schemas(max_tokens),
        **embeddings_openapi.schemas(),
        "Health": {"type": "object", "required": ["status", "service"], "properties": {
            "status": {"enum": ["ok", "error"]}, "service": STR, "version": STR,
            "engine": {"type": "object", "description": "state, model (the most recently used), pid, error, loading, "
                       "models (every resident one), default_model (what a request naming none gets)"},
            "remotes": {"type": "array", "description": "each upstream: name, host, state (up, degraded, down, "
                        "unknown), last_error, models", "items": OBJ}},
            "description": "version and engine only on a loopback bind and Host, or with the API key"},
        "Identity": {"type": "object", "required": ["service", "proof"], "properties": {
            "service": STR, "proof": {"type": ["string", "null"]}}},
    }


def _wire_schemas(max_tokens: int) -> dict:
    """Anthropic Messages and OpenAI Responses bodies: text, tool calls and their results."""
    text_block = {"type": "object", "required": ["type", "text"], "properties": {"type": {"const": "text"}, "text": STR}}
    content = {"oneOf": [STR, {"type": "array", "items": text_block}]}
    tool_use = {"type": "object", "required": ["type", "id", "name", "input"], "properties": {
        "type": {"const": "tool_use"}, "id": STR, "name": STR, "input": OBJ}}
    tool_result = {"type": "object", "required": ["type", "tool_use_id"], "properties": {
        "type": {"const": "tool_result"}, "tool_use_id": STR, "content": content, "is_error": BOOL}}
    thinking = {"type": "object", "required": ["type", "thinking"], "properties": {
        "type": {"const": "thinking"}, "thinking": STR, "signature": STR}}
    a_msg = {"type": "object", "required": ["role", "content"], "properties": {
        "role": {"enum": ["user", "assistant"]},
        "content": {"oneOf": [STR, {"type": "array", "items": {"oneOf": [text_block, tool_use, tool_result]}}]}}}
    a_tool = {"type": "object", "required": ["name", "input_schema"], "properties": {
        "name": NAME, "description": STR, "input_schema": OBJ}}
    a_choice = {"type": "object", "required": ["type"], "properties": {
        "type": {"enum": ["auto", "any", "tool", "none"]}, "name": STR, "disable_parallel_tool_use": BOOL}}
    a_common = {"model": STR, "messages": {"type": "array", "minItems": 1, "items": a_msg},
                "system": content, "metadata": OBJ, "tools": {"type": "array", "maxItems": 8, "items": a_tool},
                "tool_choice": a_choice, "thinking": {"type": "object", "required": ["type"], "properties": {
                    "type": {"enum": ["enabled", "disabled", "adaptive"]}, "budget_tokens": {**INT, "minimum": 1}}}}
    a_usage = {"type": "object", "required": ["input_tokens", "output_tokens"], "properties": {
        k: INT for k in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")}}
    r_part = {"type": "object", "required": ["type", "text"], "properties": {
        "type": {"enum": ["input_text", "output_text"]}, "text": STR}}
    r_item = {"type": "object", "required": ["role", "content"], "properties": {
        "type": {"const": "message"}, "role": {"enum": ["user", "assistant", "system", "developer"]},
        "content": {"oneOf": [STR, {"type": "array", "items": r_part}]}}}
    r_call = {"type": "object", "required": ["type", "call_id", "name", "arguments"], "properties": {
        "type": {"const": "function_call"}, "call_id": STR, "name": STR, "arguments": STR}}
    r_output = {"type": "object", "required": ["type", "call_id", "output"], "properties": {
        "type": {"const": "function_call_output"}, "call_id": STR, "output": STR}}
    r_tool = {"type": "object", "required": ["type", "name"], "properties": {
        "type": {"const": "function"}, "name": NAME, "description": STR, "parameters": OBJ, "strict": BOOL}}
    r_format = {"type": "object", "required": ["type"], "properties": {
        "type": {"enum": ["text", "json_object", "json_schema"]}, "name": STR, "schema": OBJ, "strict": BOOL}}
    return {
        "AnthropicError": {"type": "object", "required": ["type", "error"], "properties": {
            "type": {"const": "error"}, "error": {"type": "object", "required": ["type", "message"], "properties": {
                "type": STR, "message": STR}}}},
        "AnthropicMessagesRequest": {"type": "object", "required": ["model", "messages", "max_tokens"], "properties": {
            **a_common, "max_tokens": {**INT, "minimum": 1, "maximum": max_tokens, "examples": [8]},
            "stop_sequences": {"type": "array", "items": STR, "maxItems": 16}, "stream": BOOL,
            "temperature": {**NUM, "minimum": 0, "maximum": 1}, "top_p": {**NUM, "minimum": 0, "maximum": 1},
            "top_k": {**INT, "minimum": 0}, "output_config": {"type": "object", "properties": {
                "format": {"type": "object", "required": ["type", "schema"], "properties": {
                    "type": {"const": "json_schema"}, "schema": OBJ}},
                "effort": {"enum": ["low", "medium", "high", "xhigh", "max"]}}}},
            "examples": [{"model": "smollm2-135m", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}]},
        "AnthropicCountTokensRequest": {"type": "object", "required": ["model", "messages"], "properties": a_common,
                                        "examples": [{"model": "smollm2-135m",
                                                      "messages": [{"role": "user", "content": "Hi"}]}]},
        "AnthropicMessage": {"type": "object", "required": ["id", "type", "role", "content", "model", "stop_reason",
                                                            "usage"], "properties": {
            "id": STR, "type": {"const": "message"}, "role": {"const": "assistant"}, "model": STR,
            "content": {"type": "array", "items": {"oneOf": [text_block, tool_use, thinking]}},
            "stop_reason": {"enum": ["end_turn", "max_tokens", "stop_sequence", "tool_use", None]},
            "stop_sequence": {"type": ["string", "null"]}, "usage": a_usage}},
        "AnthropicTokenCount": {"type": "object", "required": ["input_tokens"], "properties": {"input_tokens": INT}},
        "ChatTokenCount": {"type": "object", "required": ["prompt_tokens", "dropped_messages"],
                           "properties": {"prompt_tokens": INT, "dropped_messages": INT}},
        "ResponsesRequest": {"type": "object", "required": ["input"], "properties": {
            "model": STR, "input": {"oneOf": [STR, {"type": "array", "minItems": 1, "items": {
                "oneOf": [r_item, r_call, r_output]}}]},
            "tools": {"type": "array", "maxItems": 8, "items": r_tool}, "parallel_tool_calls": BOOL,
            "tool_choice": {"oneOf": [{"enum": ["auto", "none", "required"]}, {
                "type": "object", "required": ["type", "name"], "properties": {"type": {"const": "function"},
                                                                              "name": STR}}]},
            "text": {"type": "object", "properties": {"format": r_format}},
            "instructions": STR, "max_output_tokens": {**INT, "minimum": 1, "maximum": max_tokens, "examples": [8]},
            "temperature": {**NUM, "minimum": 0, "maximum": 2}, "top_p": {**NUM, "minimum": 0, "maximum": 1},
            "stream": BOOL, "store": BOOL, "previous_response_id": STR, "metadata": OBJ,
            "reasoning": {"type": "object", "properties": {"effort": {"enum": sorted(EFFORTS)}}}},
            "examples": [{"model": "smollm2-135m", "input": "Hi", "max_output_tokens": 8}]},
        "Response": {"type": "object", "required": ["id", "object", "status", "output"], "properties": {
            "id": STR, "object": {"const": "response"}, "status": STR, "model": STR, "output": {"type": "array"},
            "usage": {"type": ["object", "null"]}, "previous_response_id": {"type": ["string", "null"]}}},
        "ResponseDeleted": {"type": "object", "required": ["id", "deleted"], "properties": {"id": STR,
                                                                                           "deleted": BOOL}},
    }


def _json(schema: dict) -> dict:
    return {"application/json": {"schema": schema}}


def _op(summary: str, ok: dict | None = None, *, body: str | None = None, ollama: bool = False,
        anthropic: bool = False,
        stream: str | None = None, query: list | None = None, tag: str = "hearth", status: str = "200",
        path_params: tuple[str, ...] = ()) -> dict:
    ok_content = _json(ok or OBJ)
    if stream == "text/event-stream":  # the schema of one event: a JSON chunk (or [DONE]) in ``data``
        ok_content[stream] = {"schema": {"type": "object", "required": ["data"], "properties": {"data": STR}}}
        if ok is None:
            del ok_content["application/json"]
    elif stream:  # one JSON object per line
        ok_content[stream] = {"schema": STR}
    op = {"summary": summary, "tags": [tag], "responses": {
        status: {"description": "OK", "content": ok_content},
        "default": {"description": "An error", "content": _json(_ref(
            "OllamaError" if ollama else "AnthropicError" if anthropic else "OpenAIError"))}}}
    if body:
        op["requestBody"] = {"required": True, "content": _json(_ref(body))}
    params = [{"name": n, "in": "path", "required": True, "schema": STR} for n in path_params] + (query or [])
    if params:
        op["parameters"] = params
    return op


def _q(name: str, schema: dict) -> dict:
    return {"name": name, "in": "query", "required": False, "schema": schema}


def _text_op(summary: str) -> dict:
    op = _op(summary)
    op["responses"]["200"]["content"] = {"text/plain": {"schema": STR}}
    return op


OPERATIONS = {
    ("GET", "/"): _text_op("'Hearth is running': the base URL answers the probe clients send first"),
    ("GET", "/health"): _op("Service and engine state (never needs the API key)", _ref("Health")),
    ("GET", "/hearth/identity"): _op("HMAC-SHA256 of 'hearth-identity|PORT|NONCE' under the API key (null without "
                                     "one): a client proves the service holds its key before sending it",
                                     _ref("Identity"), query=[{**_q("nonce", {**STR, "pattern": "^[A-Za-z0-9_-]{16,128}$"}),
                                                              "required": True}]),
    ("GET", "/hearth/stats"): _op("Per resident model: engine counters, KV and prefix cache, memory, "
                                  "decode_limit_tps (the most tokens/s its placement's memory bandwidth allows "
                                  "one stream; null when not known); loads and unloads per model; the memory "
                                  "budget", OBJ),
    ("POST", "/hearth/unload"): _op("Unload every loaded model (their memory goes back); needs the key if set", OBJ),
    ("POST", "/hearth/models/{id}/load"): _op("Load a model (or take the resident one): pin, ctx, keep_alive",
                                              OBJ, body="ModelLoadRequest", path_params=("id",)),
    ("POST", "/hearth/models/{id}/unload"): _op("Unload a model, at every context it is loaded at", OBJ,
                                                path_params=("id",)),
    ("GET", "/hearth/models/{id}/template"): _op("The chat template a model renders with (its own, the one stored "
                                                 "for it, or --chat-template-file), its BOS and EOS, and the output "
                                                 "contract while it is loaded", _ref("ModelTemplate"),
                                                 path_params=("id",)),
    ("PUT", "/hearth/models/{id}/template"): _op("Store a replacement chat template for a model (400 when it does not "
                                                 "render a conversation); an idle loaded model is unloaded; the "
                                                 "user's act: needs the key or the confirmation token",
                                                 _ref("ModelTemplate"), body="ModelTemplateRequest",
                                                 path_params=("id",)),
    ("DELETE", "/hearth/models/{id}/template"): _op("Go back to the model's own chat template; the user's act, as PUT",
                                                    _ref("ModelTemplate"), path_params=("id",)),
    ("GET", "/hearth/models/{id}/settings"): _op("A model's stored load settings (context, GPU layers, KV cache "
                                                 "type; null: the service's choice) and what it is loaded with",
                                                 _ref("ModelLoadSettings"), path_params=("id",)),
    ("PUT", "/hearth/models/{id}/settings"): _op("Store a model's load settings (a request's own context still wins); "
                                                 "an idle loaded model is unloaded; the user's act: needs the key or "
                                                 "the confirmation token", _ref("ModelLoadSettings"), body="LoadSettings",
                                                 path_params=("id",)),
    ("DELETE", "/hearth/models/{id}/settings"): _op("Forget a model's load settings; the user's act, as PUT",
                                                    _ref("ModelLoadSettings"), path_params=("id",)),
    ("GET", "/hearth/hardware"): _op("This machine: CPU, RAM, GPUs, llama.cpp backends", OBJ),
    ("GET", "/hearth/fit"): _op("Will a model fit, at which context, how fast", OBJ, query=[
        _q("model", STR), _q("ctx", {**STR, "pattern": "^[0-9]+$"}), _q("kv_type", {"enum": ["f16", "q8_0", "q4_0"]})]),
    ("GET", "/v1/models"): _op("Local models (OpenAI format) with loaded, context length, capabilities, memory", _ref("ModelList"), tag="openai"),
    ("POST", "/v1/chat/completions"): _op("Chat completion (OpenAI format; SSE with stream: true)",
                                          _ref("ChatCompletion"), body="ChatCompletionRequest",
                                          stream="text/event-stream", tag="openai"),
    ("POST", "/hearth/count_tokens"): _op("Count a chat completion's prompt tokens as the model would get them "
                                          "(its context_overflow policy applied)", _ref("ChatTokenCount"),
                                          body="ChatCompletionRequest", tag="openai"),
    ("POST", "/v1/completions"): _op("Text completion (OpenAI format; SSE with stream: true)",
                                     _ref("ChatCompletion"), body="CompletionRequest",
                                     stream="text/event-stream", tag="openai"),
    ("POST", "/v1/responses"): _op("Create a response (OpenAI Responses; SSE events with stream: true)",
                                   _ref("Response"), body="ResponsesRequest", stream="text/event-stream",
                                   tag="openai"),
    ("GET", "/v1/responses/{id}"): _op("A stored response", _ref("Response"), path_params=("id",), tag="openai"),
    ("DELETE", "/v1/responses/{id}"): _op("Delete a stored response", _ref("ResponseDeleted"), path_params=("id",),
                                          tag="openai"),
    ("POST", "/v1/messages"): _op("Create a message (Anthropic Messages; SSE events with stream: true)",
                                  _ref("AnthropicMessage"), body="AnthropicMessagesRequest", anthropic=True,
                                  stream="text/event-stream", tag="anthropic"),
    ("POST", "/v1/messages/count_tokens"): _op("Count a message request's input tokens (Anthropic)",
                                               _ref("AnthropicTokenCount"), body="AnthropicCountTokensRequest",
                                               anthropic=True, tag="anthropic"),
    ("POST", "/api/chat"): _op("Chat (Ollama format; NDJSON unless stream: false)", _ref("OllamaChatResponse"),
                               body="OllamaChatRequest", ollama=True, stream="application/x-ndjson", tag="ollama"),
    ("POST", "/api/generate"): _op("Generate (Ollama format; NDJSON unless stream: false)",
                                   _ref("OllamaGenerateResponse"), body="OllamaGenerateRequest", ollama=True,
                                   stream="application/x-ndjson", tag="ollama"),
    ("GET", "/api/tags"): _op("Local models (Ollama format)", _ref("OllamaTags"), ollama=True, tag="ollama"),
    ("POST", "/api/show"): _op("One model's details and GGUF metadata", _ref("OllamaShow"),
                               body="OllamaModelRequest", ollama=True, tag="ollama"),
    ("GET", "/api/ps"): _op("Every loaded model, its memory and when it unloads", _ref("OllamaPs"), ollama=True, tag="ollama"),
    ("GET", "/api/version"): _op("The Ollama API version these endpoints follow", OBJ, ollama=True, tag="ollama"),
    ("POST", "/api/pull"): _op("Download a model (progress as NDJSON unless stream: false); needs the key if set",
                               _ref("OllamaProgress"), body="OllamaPullRequest", ollama=True,
                               stream="application/x-ndjson", tag="ollama"),
    ("DELETE", "/api/delete"): _op("Delete a downloaded model, unloading it first when idle (as DELETE "
                                   "/hearth/models/{id}); needs the key if set", OBJ,
                                   body="OllamaModelRequest", ollama=True, tag="ollama"),
    ("GET", "/openapi.json"): _op("This document", OBJ),
    # the model store
    ("GET", "/hearth/models"): _op("Local models (embedded, downloaded, imported, resident files; as /v1/models "
                                     "and /api/tags) and disk use", OBJ, tag="store"),
    ("POST", "/hearth/models/pull"): _op("Start (or join) a model download; follow it on /hearth/downloads/events",
                                         OBJ, body="StoreModelRequest", status="202", tag="store"),
    ("POST", "/hearth/models/import"): _op("Register a local .gguf by reference", OBJ, body="StorePathRequest",
                                           status="201", tag="store"),
    ("DELETE", "/hearth/models/{id}"): _op("Delete a downloaded model (an imported one is only forgotten); a loaded, "
                                           "idle one is unloaded first, a pinned or busy one refused (409)", OBJ,
                                           path_params=("id",), tag="store"),
    ("GET", "/hearth/catalog"): _op("The curated catalog with a fit verdict per model", OBJ, tag="store"),
    ("GET", "/hearth/downloads"): _op("Downloads and their progress", OBJ, tag="store"),
    ("GET", "/hearth/downloads/events"): _op("Download progress as Server-Sent Events", stream="text/event-stream",
                                             tag="store"),
    ("POST", "/hearth/downloads/{id}/{action}"): _op("Pause, resume or cancel a download", OBJ,
                                                     path_params=("id", "action"), tag="store"),
    ("GET", "/hearth/search"): _op("Search the hub for GGUF models", OBJ, query=[
        _q("q", STR), _q("limit", {**STR, "pattern": "^[0-9]+$"})], tag="store"),
    ("GET", "/hearth/search/files"): _op("A hub repository's GGUF files", OBJ, query=[_q("repo", STR)], tag="store"),
    ("GET", "/hearth/search/card"): _op("A hub repository's model card (README.md as Markdown, at most 256 KiB); 404 "
                                        "when it has none", OBJ, query=[_q("repo", STR)], tag="store"),
    ("POST", "/hearth/quantize"): _op("Make a smaller version of a local model (hearth quantize as a job; one at a "
                                      "time, 409 while one runs); the user's act: needs the key or the confirmation "
                                      "token", OBJ, body="QuantizeRequest", status="202", tag="store"),
    ("GET", "/hearth/quantize"): _op("Quantize jobs of this run: step, progress, result or error", OBJ, tag="store"),
    ("DELETE", "/hearth/quantize/{id}"): _op("Stop a quantize job (the same request later resumes it); the user's act, "
                                             "like starting one: needs the key or the confirmation token", OBJ,
                                             path_params=("id",), tag="store"),
    ("GET", "/hearth/remotes"): _op("Upstreams (remote engines): address, where the key is, models, health",
                                    OBJ, tag="remote"),
    ("POST", "/hearth/remotes"): _op("Add an upstream (its key goes to the OS keyring); prompts to its models leave "
                                     "this computer", OBJ, body="RemoteAddRequest", status="201", tag="remote"),
    ("DELETE", "/hearth/remotes"): _op("Remove the upstream named by ?name=", OBJ, query=[_q("name", STR)],
                                       tag="remote"),
    ("DELETE", "/hearth/remotes/{name}"): _op("Remove an upstream (and its key)", OBJ, path_params=("name",),
                                              tag="remote"),
    ("POST", "/hearth/remotes/{name}/refresh"): _op("Read an upstream's models again now", OBJ,
                                                    path_params=("name",), tag="remote"),
}


OPERATIONS.update(embeddings_openapi.operations(_op, _ref))


def build(max_tokens: int) -> dict:
    paths: dict = {}
    for (method, path), op in OPERATIONS.items():
        paths.setdefault(path, {})[method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "Hearth", "version": __version__,
                 "description": "Local LLM service: OpenAI-compatible (/v1: chat, completions, Responses), "
                                "Anthropic Messages (/v1/messages), Ollama-compatible (/api), embeddings "
                                "(/v1/embeddings, /api/embed), reranking (/v1/rerank, /rerank) and Hearth's own "
                                "(/health, /hearth) endpoints. When the service has an API key, every route but "
                                "/health needs 'Authorization: Bearer <key>' (or 'x-api-key: <key>')."},
        "paths": paths,
        "components": {"schemas": _schemas(max_tokens),
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"},
                                           "xApiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"}}},
        "security": [{}, {"bearer": []}, {"xApiKey": []}],
    }


async def document(request: web.Request) -> web.Response:
    return web.json_response(build(request.app[CONFIG].security.max_tokens_limit))
