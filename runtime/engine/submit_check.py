"""The worker's own check of a ``Submit`` before any of it reaches llama.cpp.

The service validates every request first (``runtime/server/validation.py``) with messages
that name the field; this is the second line, so that no message on the pipe, from any
client of the worker, can make the tokenizer, the template or a sampler raise or abort.
"""

from __future__ import annotations

from runtime.engine.context_overflow import POLICIES
from runtime.engine.engine import RequestRejected
from runtime.engine.messages import Submit
from runtime.sampling_params import SamplingParams, utf8_ok

#: completions of one prompt (each takes a sequence id of the context)
MAX_N = 64


def _text_ok(value: object) -> bool:
    return isinstance(value, str) and utf8_ok(value)


def _content_ok(content: object) -> bool:
    if content is None or _text_ok(content):
        return True
    if not isinstance(content, list):
        return False
    return all(_text_ok(p) or (isinstance(p, dict) and p.get("type") == "text" and _text_ok(p.get("text")))
               for p in content)


def check_submit(msg: Submit) -> None:
    """Raise ``RequestRejected`` (with a code) when ``msg`` cannot be run as it is."""
    if not isinstance(msg.request_id, str) or not msg.request_id:
        raise RequestRejected("the request id must be a string")
    if isinstance(msg.n, bool) or not isinstance(msg.n, int) or not 1 <= msg.n <= MAX_N:
        raise RequestRejected(f"n must be an integer between 1 and {MAX_N}")
    if not isinstance(msg.params, SamplingParams):
        raise RequestRejected("the sampling parameters are missing")
    if (why := msg.params.problem()) is not None:
        raise RequestRejected(why)
    if msg.overflow is not None and msg.overflow not in POLICIES:
        raise RequestRejected(f"context_overflow must be one of {', '.join(POLICIES)}")
    given = [x is not None for x in (msg.prompt, msg.messages, msg.tokens)]
    if sum(given) > 1:
        raise RequestRejected("send one of prompt, messages or tokens")
    if msg.messages is not None:
        if not isinstance(msg.messages, list) or not msg.messages:
            raise RequestRejected("messages must be a non-empty list")
        for i, m in enumerate(msg.messages):
            if not isinstance(m, dict) or not _text_ok(m.get("role")) or not _content_ok(m.get("content")):
                raise RequestRejected(f"messages[{i}] must have a role and text content")
    elif msg.tokens is not None:
        if not isinstance(msg.tokens, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in msg.tokens):
            raise RequestRejected("tokens must be a list of token ids")
    elif msg.prompt is not None and not _text_ok(msg.prompt):
        raise RequestRejected("the prompt is not valid text (a lone UTF-16 surrogate)")
