"""A recording proxy on loopback between an agent client and a server.

It forwards every request unchanged and streams the answer back, and keeps for each request:
the route, the status, when the first byte of content arrived (keep-alives do not count), the
usage the answer reported (prompt tokens and the part served from the cache, in whichever wire
format) and the request's body. ``hearth launch --check`` reads it, and so do the agent tests and
``bench/agent_session.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
import json
import threading
import time
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

_HOP = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding", "keep-alive"}


@dataclass(slots=True)
class Exchange:
    method: str
    path: str
    body: bytes
    status: int = 0
    started: float = 0.0
    first_content: float | None = None  #: seconds to the first generated content (keep-alives excluded)
    ended: float | None = None
    answer: bytes = b""
    gaps: list[float] = field(default_factory=list)  #: seconds between successive chunks of the answer
    client_closed: bool = False  #: the client closed the connection before the answer ended

    @property
    def ttft(self) -> float | None:
        return self.first_content

    def documents(self) -> Iterator[dict]:
        """The JSON objects of the answer: the whole body, SSE ``data:`` lines or NDJSON lines."""
        for line in self.answer.decode("utf-8", "replace").splitlines():
            line = line.removeprefix("data: ").strip()
            if not line.startswith("{"):
                continue
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                yield doc

    def usage(self) -> tuple[int, int] | None:
        """(prompt tokens, of which cached) as the answer reported them, or None."""
        found = None
        for doc in self.documents():
            found = _usage(doc) or found
        return found

    def cut_short(self) -> bool:
        """Whether the reply ended at its output-token limit, in any wire format: OpenAI's
        ``finish_reason: length``, a Responses ``incomplete`` for ``max_output_tokens``,
        Anthropic's ``stop_reason: max_tokens``, Ollama's ``done_reason: length``."""
        return any(_cut(doc) for doc in self.documents())

    def request(self) -> dict | None:
        try:
            return json.loads(self.body)
        except ValueError:
            return None


def _cut(doc: dict) -> bool:
    choices = doc.get("choices")
    if isinstance(choices, list) and any(isinstance(c, dict) and c.get("finish_reason") == "length" for c in choices):
        return True
    response = doc.get("response")
    details = (response if isinstance(response, dict) else doc).get("incomplete_details")
    if isinstance(details, dict) and details.get("reason") == "max_output_tokens":
        return True
    delta = doc.get("delta")
    stop = delta.get("stop_reason") if isinstance(delta, dict) else None
    return "max_tokens" in (doc.get("stop_reason"), stop) or doc.get("done_reason") == "length"


def _usage(doc: dict) -> tuple[int, int] | None:
    u = doc.get("usage") or (doc.get("response") or {}).get("usage") or (doc.get("message") or {}).get("usage")
    if not isinstance(u, dict):
        return None
    if "cache_read_input_tokens" in u:  # Anthropic: input_tokens excludes what was read from the cache
        cached = u.get("cache_read_input_tokens") or 0
        return (u.get("input_tokens") or 0) + cached, cached
    if "input_tokens" in u:  # Responses
        return u["input_tokens"], (u.get("input_tokens_details") or {}).get("cached_tokens", 0)
    if "prompt_tokens" in u:  # OpenAI chat
        return u["prompt_tokens"], (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    if "prompt_eval_count" in doc:  # Ollama
        return doc["prompt_eval_count"], 0
    return None


#: what a chunk that carries generated content contains, in each wire format
_CONTENT = (b"content_block_delta", b'.delta"', b'"delta":{"content"', b'"delta":{"reasoning', b'"delta":{"tool_calls',
            b'"message":{"role"', b'"response":"')


def _has_content(chunk: bytes) -> bool:
    return any(marker in chunk for marker in _CONTENT)


class RecordingProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.exchanges: list[Exchange] = []
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "RecordingProxy":
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the recording proxy did not start")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def generations(self) -> list[Exchange]:
        """The exchanges that generated (chat, completions, Responses, Messages)."""
        ends = ("/chat/completions", "/completions", "/responses", "/messages", "/api/chat", "/api/generate")
        return [e for e in self.exchanges if e.method == "POST" and e.path.endswith(ends)]

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        timeout = aiohttp.ClientTimeout(total=None, sock_read=1800)
        async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_route("*", "/{tail:.*}", lambda r: self._forward(session, r))
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self._ready.set()
            await self._stop.wait()
            await runner.cleanup()

    async def _forward(self, session: aiohttp.ClientSession, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        ex = Exchange(request.method, request.path, body, started=time.monotonic())
        self.exchanges.append(ex)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        url = self.upstream + request.path_qs
        async with session.request(request.method, url, data=body, headers=headers) as up:
            ex.status = up.status
            out = web.StreamResponse(status=up.status, headers={
                k: v for k, v in up.headers.items() if k.lower() not in _HOP})
            await out.prepare(request)
            last = time.monotonic()
            async for chunk in up.content.iter_any():
                now = time.monotonic()
                ex.gaps.append(now - last)
                last = now
                if ex.first_content is None and _has_content(chunk):
                    ex.first_content = now - ex.started
                ex.answer += chunk
                try:
                    await out.write(chunk)
                except ConnectionError:  # the client went away: the answer so far is kept
                    ex.client_closed = True
                    break
            ex.ended = time.monotonic() - ex.started
            if ex.first_content is None:
                ex.first_content = ex.ended
            if not ex.client_closed:
                await out.write_eof()
            return out
