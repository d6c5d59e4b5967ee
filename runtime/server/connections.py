"""Limits on the service's connections, below the HTTP layer: nobody holds the door open.

aiohttp alone waits forever for a request's head on a new connection, for a body that stopped
arriving, and for as many connections as the process has file descriptors, and keeps an idle
connection an hour; a thousand idle or half-sent connections then lock every client out. The
``ConnectionGuard`` makes each connection earn its place (``SecurityConfig`` holds the knobs):

- **head deadline**: a new connection must send a complete request head within
  ``header_timeout`` seconds (a slowloris sending a byte a second is closed then); later
  requests on a kept-alive connection must start within ``keepalive_timeout``;
- **body deadlines**: a request body that makes no progress for ``body_timeout`` seconds, or
  is not complete ``body_total_timeout`` seconds after its head, is dropped with its connection
  (a stalled upload holds no memory);
- **connection cap**: at ``max_connections`` open, a new connection first closes one that holds
  no request: the oldest that never sent a whole request head, else the one silent longest
  (a client between two requests keeps its connection); when every one holds a request,
  it is let in on ``reserved_connections`` kept for ``/health`` and for requests that carry
  the API key or the app's confirmation token (``security.guard_middleware`` answers any other
  request there with 503); beyond those it is closed at once.

One sweep a second checks every connection's deadlines (a thousand connections cost well under
a millisecond). The limits apply to every listening site of the runner (``--ollama-port`` too).
"""

from __future__ import annotations

import asyncio
from typing import cast
import contextlib
import logging
from collections import Counter
from dataclasses import dataclass

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

log = logging.getLogger("hearth.server")
SWEEP_S = 1.0


@dataclass(slots=True, frozen=True)
class ConnectionLimits:
    """The connection knobs (from ``SecurityConfig``, where their defaults are written)."""

    header_timeout: float
    body_timeout: float
    body_total_timeout: float
    keepalive_timeout: float
    max_connections: int
    reserved_connections: int


def limits_of(security) -> ConnectionLimits:
    """The limits a ``SecurityConfig`` sets."""
    return ConnectionLimits(security.header_timeout, security.body_timeout, security.body_total_timeout,
                            security.keepalive_timeout, security.max_connections, security.reserved_connections)


def fd_room(connections: int) -> None:
    """Raise the soft limit on open files (toward the hard one) so that the cap on connections,
    not the operating system, is what a flood meets: at the file limit, accepting fails for
    every client alike. 256 are kept for the model workers' pipes, logs and model files."""
    try:
        import resource
    except ImportError:  # Windows: no such limit
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = connections + 256
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))


class GuardedProtocol(RequestHandler):
    """aiohttp's HTTP protocol, with the times the guard checks and its place in the guard."""

    def __init__(self, manager: web.Server, guard: "ConnectionGuard", **kwargs) -> None:
        super().__init__(manager, **kwargs)
        self.guard = guard
        self.opened_at = self.last_data_at = 0.0
        self.head_at: float | None = None  #: when the head of the request in progress arrived
        self.reserve_only = False  #: let in on the reserve: /health and the app's requests only

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.opened_at = self.last_data_at = self._loop.time()
        if not self.guard.admit(self):
            cast(asyncio.Transport, transport).abort()  # full, and the reserve too: nothing was read, nothing to answer
            return
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self.guard.leave(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self.last_data_at = self._loop.time()
        super().data_received(data)

    @property
    def requests(self) -> int:
        """Request heads received on this connection."""
        return self._request_count

    @property
    def holds_request(self) -> bool:
        """A request's head has arrived and its answer is not finished."""
        return self._current_request is not None or bool(self._messages)

    def overdue(self, now: float, limits: ConnectionLimits) -> str | None:
        """Which deadline this connection missed, if any."""
        if self.requests == 0 and now - self.opened_at > limits.header_timeout:
            return "head"
        request = self._current_request
        if request is None or request.content.is_eof():
            self.head_at = None
            return None
        if self.head_at is None:
            self.head_at = now
        if now - self.last_data_at > limits.body_timeout:
            return "body_stalled"
        if now - self.head_at > limits.body_total_timeout:
            return "body_slow"
        return None


class ConnectionGuard:
    """Every open connection of one runner, oldest first, and the deadlines' sweep."""

    def __init__(self, limits: ConnectionLimits) -> None:
        self.limits = limits
        self.open: dict[GuardedProtocol, None] = {}  # insertion order: oldest first
        self.closed: Counter[str] = Counter()  #: connections closed by the guard, by reason
        self._task: asyncio.Task | None = None

    def admit(self, conn: GuardedProtocol) -> bool:
        """Place a new connection (see the module docstring); False: close it unread."""
        if len(self.open) >= self.limits.max_connections and not self._evict_one():
            if len(self.open) >= self.limits.max_connections + self.limits.reserved_connections:
                self.closed["full"] += 1
                return False
            conn.reserve_only = True
        self.open[conn] = None
        return True

    def _evict_one(self) -> bool:
        """Close one connection that holds no request: the oldest that never sent a whole request
        (a flood's), else the one silent longest (never a client between two quick requests)."""
        silent: GuardedProtocol | None = None
        for conn in self.open:
            if conn.holds_request:
                continue
            if conn.requests == 0:
                self._close(conn, "evicted")
                return True
            if silent is None or conn.last_data_at < silent.last_data_at:
                silent = conn
        if silent is None:
            return False
        self._close(silent, "evicted")
        return True

    def leave(self, conn: GuardedProtocol) -> None:
        self.open.pop(conn, None)

    def _close(self, conn: GuardedProtocol, reason: str) -> None:
        self.closed[reason] += 1
        self.open.pop(conn, None)
        conn.force_close()

    def sweep(self, now: float) -> None:
        for conn in list(self.open):
            reason = conn.overdue(now, self.limits)
            if reason is not None:
                self._close(conn, reason)

    async def _sweep_forever(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(SWEEP_S)
            try:
                self.sweep(loop.time())
            except Exception:  # a bug here must not end the deadlines for good
                log.exception("the connection sweep failed")

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._sweep_forever(), name="connection-guard")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


class GuardedServer(web.Server):
    """aiohttp's low-level server, making ``GuardedProtocol`` connections."""

    def __init__(self, *args, guard: ConnectionGuard, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard

    def __call__(self) -> GuardedProtocol:
        return GuardedProtocol(self, self.guard, loop=self._loop, **self._kwargs)


class GuardedRunner(web.AppRunner):
    """An ``AppRunner`` whose connections the guard limits; the guard's sweep runs from
    ``setup`` to ``cleanup``."""

    def __init__(self, app: web.Application, limits: ConnectionLimits, **kwargs) -> None:
        # after an early answer aiohttp reads and drops the rest of a body for ``lingering_time``
        # (10 s): a stalled client gets no longer there than a stalled body does
        super().__init__(app, keepalive_timeout=limits.keepalive_timeout, lingering_time=limits.body_timeout,
                         **kwargs)
        self.guard = ConnectionGuard(limits)

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        guarded = GuardedServer(server.request_handler, request_factory=server.request_factory,
                                handler_cancellation=server.handler_cancellation, loop=server._loop,
                                guard=self.guard, **server._kwargs)
        return guarded

    async def setup(self) -> None:
        fd_room(self.guard.limits.max_connections + self.guard.limits.reserved_connections)
        await super().setup()
        self.guard.start()

    async def cleanup(self) -> None:
        await self.guard.stop()
        await super().cleanup()
