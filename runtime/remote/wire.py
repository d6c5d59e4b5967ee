"""What goes to an upstream and what comes back: an OpenAI chat or completions request body
from Hearth's sampling settings, and the server-sent events of its streamed answer."""

from __future__ import annotations

import json
import math

from runtime.engine.logprobs import TokenLogprob
from runtime.sampling_params import DEFAULT_TOP_K, SamplingParams
from runtime.tool_choice import ToolChoice

#: message fields an OpenAI-compatible server takes (the rest is Hearth's own)
_MESSAGE_FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id")
#: Every read of an upstream's answer is capped, so a hostile or broken one cannot fill the
#: service's memory. A stream line or one event longer than this is refused (most servers send
#: a multi-megabyte line only in error):
MAX_LINE_BYTES = 4 * 1024 * 1024
#: a whole streamed answer (16k tokens with 20 logprobs each are about 16 MiB)
MAX_STREAM_BYTES = 64 * 1024 * 1024
#: a ``/v1/models`` answer (thousands of models fit in well under 1 MiB)
MAX_MODELS_BYTES = 4 * 1024 * 1024
#: an error answer: read only for the service log, never shown to a client
MAX_ERROR_BYTES = 16 * 1024


class MalformedStream(ValueError):
    """The upstream's stream is not OpenAI's server-sent events. The message is a fixed phrase:
    an upstream's bytes never reach a client."""


class AnswerTooLarge(ValueError):
    """An upstream's answer is longer than its cap."""


async def read_capped(response, limit: int) -> bytes:
    """The body of an aiohttp ``response``, at most ``limit`` bytes (``AnswerTooLarge`` beyond:
    the rest is not read)."""
    if response.content_length is not None and response.content_length > limit:
        raise AnswerTooLarge(f"the answer is {response.content_length} bytes; the limit is {limit}")
    body = bytearray()
    while chunk := await response.content.read(min(64 * 1024, limit + 1 - len(body))):
        body += chunk
        if len(body) > limit:
            raise AnswerTooLarge(f"the answer is longer than {limit} bytes")
    return bytes(body)


async def read_error_body(response) -> bytes:
    """An error answer's first bytes, for the service log only (never shown to a client)."""
    try:
        return await read_capped(response, MAX_ERROR_BYTES)
    except AnswerTooLarge:
        return b"(a longer answer than Hearth reads)"


def _message(m: dict) -> dict:
    out = {k: m[k] for k in _MESSAGE_FIELDS if k in m}
    if out.get("tool_calls"):  # Hearth keeps arguments as objects; OpenAI's wire has them as JSON text
        calls = []
        for i, c in enumerate(out["tool_calls"]):
            args = c["function"].get("arguments")
            calls.append({"id": c.get("id") or f"call_{i}", "type": "function",
                          "function": {"name": c["function"]["name"],
                                       "arguments": args if isinstance(args, str) else json.dumps(args or {})}})
        out["tool_calls"] = calls
    return out


def request_body(model: str, params: SamplingParams, *, prompt: str | None = None,
                 messages: list[dict] | None = None, tokens: list[int] | None = None,
                 tools: list[dict] | None = None, thinking: bool | None = None,
                 tool_choice: ToolChoice | None = None) -> tuple[str, dict]:
    """(path, body) of the streamed request; only settings that differ from the defaults that
    every server shares are sent beyond OpenAI's own (``top_k``, ``min_p``, ``repeat_penalty``
    are understood by vLLM, llama.cpp's server and Ollama)."""
    body: dict = {"model": model, "stream": True, "stream_options": {"include_usage": True},
                  "temperature": params.temperature, "top_p": params.top_p}
    if messages is not None:
        path = "/chat/completions"
        body["messages"] = [_message(m) for m in messages]
        if tools:
            body["tools"] = tools
            if tool_choice is not None and tool_choice.kind != "auto":  # auto: every server's default
                body["tool_choice"] = tool_choice.openai()
        if thinking is not None:  # the client switched thinking on or off (vLLM, llama.cpp's server)
            body["chat_template_kwargs"] = {"enable_thinking": thinking}
    else:
        path = "/completions"
        body["prompt"] = prompt if prompt is not None else list(tokens or [])
    if params.logprobs and messages is None:  # completions (legacy): the number of alternatives
        body["logprobs"] = params.top_logprobs
    if params.max_tokens is not None:
        body["max_tokens"] = params.max_tokens
    if params.stop:
        body["stop"] = list(params.stop)
    if params.seed is not None:
        body["seed"] = params.seed
    if params.presence_penalty:
        body["presence_penalty"] = params.presence_penalty
    if params.frequency_penalty:
        body["frequency_penalty"] = params.frequency_penalty
    if params.top_k != DEFAULT_TOP_K:
        body["top_k"] = params.top_k
    if params.min_p:
        body["min_p"] = params.min_p
    if params.repeat_penalty != 1.0:
        body["repeat_penalty"] = params.repeat_penalty
    return path, body


class EventReader:
    """``data:`` payloads of a server-sent event stream, one per event, from byte chunks."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._data: list[str] = []
        self._event_bytes = 0  #: of the event being read (its data lines so far)
        self.total = 0  #: bytes fed so far
        self.events: list[str] = []

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if self.total > MAX_STREAM_BYTES:
            raise MalformedStream(f"the stream is longer than {MAX_STREAM_BYTES // (1024 * 1024)} MiB")
        self._buf += chunk
        while True:
            i = self._buf.find(b"\n")
            if i < 0:
                if len(self._buf) > MAX_LINE_BYTES:
                    raise MalformedStream("a line of the stream is longer than 4 MiB")
                return
            raw = bytes(self._buf[:i]).rstrip(b"\r")
            del self._buf[:i + 1]
            self._line(raw)

    def end(self) -> None:
        if self._buf:
            self._line(bytes(self._buf).rstrip(b"\r"))
            self._buf.clear()
        self._line(b"")

    def _line(self, raw: bytes) -> None:
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedStream("the stream is not UTF-8") from None
        if not line:
            if self._data:
                self.events.append("\n".join(self._data))
                self._data, self._event_bytes = [], 0
            return
        if line.startswith(":"):
            return  # a comment (keep-alive)
        name, _, value = line.partition(":")
        if name == "data":
            self._event_bytes += len(raw)
            if self._event_bytes > MAX_LINE_BYTES:
                raise MalformedStream("an event of the stream is longer than 4 MiB")
            self._data.append(value[1:] if value.startswith(" ") else value)
        elif name not in ("event", "id", "retry"):
            raise MalformedStream("a line of the stream is not a server-sent event")


def parse_event(data: str) -> dict | None:
    """One event's JSON (None for ``[DONE]``); raises ``MalformedStream``."""
    if data.strip() == "[DONE]":
        return None
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        raise MalformedStream("an event is not JSON") from None
    if not isinstance(obj, dict):
        raise MalformedStream("an event is not a JSON object")
    return obj


def _number(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else -9999.0


def chunk_logprobs(obj: dict) -> list[TokenLogprob]:
    """The logprobs of one completions chunk's tokens (the legacy ``logprobs`` lists) as the
    engine's entries (token ids unknown: -1)."""
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return []
    lp = choices[0].get("logprobs")
    if not isinstance(lp, dict):
        return []
    out = []
    if isinstance(lp.get("tokens"), list):
        values, tops = lp.get("token_logprobs") or [], lp.get("top_logprobs") or []
        for i, tok in enumerate(lp["tokens"]):
            alts = tops[i] if i < len(tops) and isinstance(tops[i], dict) else {}
            top = sorted(((-1, str(k).encode("utf-8"), _number(v)) for k, v in alts.items()), key=lambda x: -x[2])
            out.append(TokenLogprob(-1, str(tok).encode("utf-8"), True,
                                    _number(values[i] if i < len(values) else None), top))
    return out


def reasoning_part(obj: dict) -> str:
    """A chat chunk's reasoning text, which vLLM and llama.cpp's server send apart from the
    content (``delta.reasoning_content``; ``delta.reasoning`` in some servers)."""
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return ""
    delta = choices[0].get("delta")
    if not isinstance(delta, dict):
        return ""
    r = delta.get("reasoning_content") or delta.get("reasoning")
    return r if isinstance(r, str) else ""


def tool_call_deltas(obj: dict) -> list[dict]:
    """The ``delta.tool_calls`` pieces of a chat chunk ([] for none)."""
    choices = obj.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return []
    delta = choices[0].get("delta")
    calls = delta.get("tool_calls") if isinstance(delta, dict) else None
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


class ToolCalls:
    """Tool calls streamed in pieces (name, then argument fragments, per ``index``), put together."""

    def __init__(self) -> None:
        self.calls: dict[int, dict] = {}

    def add(self, deltas: list[dict]) -> None:
        for d in deltas:
            i = d.get("index", len(self.calls))
            call = self.calls.setdefault(i if isinstance(i, int) else len(self.calls), {"name": "", "arguments": ""})
            given = d.get("function")
            fn = given if isinstance(given, dict) else {}
            if isinstance(fn.get("name"), str):
                call["name"] += fn["name"]
            if isinstance(fn.get("arguments"), str):
                call["arguments"] += fn["arguments"]
            elif isinstance(fn.get("arguments"), dict):  # some servers send the object whole
                call["arguments"] = json.dumps(fn["arguments"])

    def finished(self) -> list[tuple[str, dict]]:
        """(name, arguments) of each call, in order; arguments that are not a JSON object become {}."""
        out = []
        for _, c in sorted(self.calls.items()):
            try:
                args = json.loads(c["arguments"] or "{}")
            except (ValueError, RecursionError):
                args = {}
            out.append((c["name"], args if isinstance(args, dict) else {}))
        return out


def chunk_parts(obj: dict) -> tuple[str, str | None, dict | None]:
    """(text, finish_reason, usage) of one chunk of a chat or completions stream."""
    text, finish = "", None
    choices = obj.get("choices")
    if isinstance(choices, list) and choices:
        c = choices[0] if isinstance(choices[0], dict) else {}
        delta = c.get("delta")
        if isinstance(delta, dict):
            piece = delta.get("content")
        else:
            piece = c.get("text")
        text = piece if isinstance(piece, str) else ""
        f = c.get("finish_reason")
        finish = f if isinstance(f, str) else None
    elif choices is not None and not isinstance(choices, list):
        raise MalformedStream("'choices' of a chunk is not a list")
    usage = obj.get("usage")
    return text, finish, usage if isinstance(usage, dict) else None


def error_message(body: bytes | str, limit: int = 300) -> str:
    """The message of an upstream's error answer (OpenAI's, Ollama's or plain text)."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return text.strip()[:limit]
    err = obj.get("error", obj.get("detail", obj.get("message"))) if isinstance(obj, dict) else obj
    if isinstance(err, dict):
        err = err.get("message") or json.dumps(err)
    return str(err).strip()[:limit]
