"""Server-Sent Events: ``data: {json}\\n\\n`` frames, ending with ``data: [DONE]``."""

from __future__ import annotations

import json

from aiohttp import web

SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "Connection": "keep-alive",
    "X-Accel-Buffering": "no",
}


def frame(payload: dict, event: str | None = None) -> bytes:
    """One event; ``event`` adds an ``event:`` line (Anthropic's and the Responses API's streams name
    each event, and the Anthropic SDK skips events without a name)."""
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"
_MARK = "@@hearth-text@@"


class TextFrames:
    """Frames that differ only in one text field, serialized once.

    A stream sends one frame per token; only the text changes, so the JSON around it is
    encoded once and each frame costs one ``json.dumps`` of a short string.
    """

    def __init__(self, template: dict, path: tuple, event: str | None = None) -> None:
        node = template
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = _MARK
        encoded = frame(template, event)
        self._prefix, self._suffix = encoded.split(json.dumps(_MARK).encode(), 1)

    def __call__(self, text: str) -> bytes:
        return self._prefix + json.dumps(text, ensure_ascii=False).encode() + self._suffix


async def open_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    return response
