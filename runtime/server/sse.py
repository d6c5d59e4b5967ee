"""Server-Sent Events: ``data: {json}\\n\\n`` frames, ending with ``data: [DONE]``.

A stream that has sent nothing for ``KEEPALIVE_SECONDS`` (a long prompt being computed, a
model being loaded) sends a keep-alive: an SSE comment, or the format's own event (Anthropic's
``ping``; the Responses API's ``response.in_progress`` again, since Codex's idle timer counts
events and not comments). Clients drop a stream that stays silent too long (Claude Code after 300 s, proxies
after 60 s or less) and send the whole request again, which only makes the wait longer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable

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


#: seconds of silence after which a stream sends a keep-alive
KEEPALIVE_SECONDS = 5.0
#: an SSE comment: every SSE parser skips it
COMMENT = b": keep-alive\n\n"


class EventStream(web.StreamResponse):
    """An SSE response that sends ``keepalive`` whenever ``interval`` seconds pass without a write."""

    def __init__(self, keepalive: bytes | Callable[[], bytes] = COMMENT, interval: float = KEEPALIVE_SECONDS) -> None:
        super().__init__(headers=SSE_HEADERS)
        self._keepalive, self._interval = keepalive, interval
        self._last = time.monotonic()
        self._beat: asyncio.Task | None = None

    async def prepare(self, request: web.BaseRequest):
        writer = await super().prepare(request)
        self._last = time.monotonic()
        self._beat = asyncio.create_task(self._beats())
        return writer

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        self._last = time.monotonic()
        await super().write(data)

    async def write_eof(self, data: bytes = b"") -> None:
        self.stop_keepalive()
        await super().write_eof(data)

    def stop_keepalive(self) -> None:
        if self._beat is not None:
            self._beat.cancel()
            self._beat = None

    async def _beats(self) -> None:
        # Each frame is one write of whole bytes, so a keep-alive never lands inside a frame.
        with contextlib.suppress(ConnectionError, RuntimeError, asyncio.CancelledError):
            while True:
                await asyncio.sleep(max(0.05, self._last + self._interval - time.monotonic()))
                if time.monotonic() - self._last >= self._interval:
                    ka = self._keepalive
                    await self.write(ka if isinstance(ka, bytes) else ka())


async def open_stream(request: web.Request, keepalive: bytes | Callable[[], bytes] = COMMENT) -> EventStream:
    """A prepared SSE response; its keep-alives stop when the handler ends, however it ends."""
    response = EventStream(keepalive)
    await response.prepare(request)
    task = asyncio.current_task()
    if task is not None:
        task.add_done_callback(lambda _: response.stop_keepalive())
    return response
