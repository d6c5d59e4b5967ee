"""Limits on the service's connections, below the HTTP layer: nobody holds the door open.

aiohttp alone waits forever for a request's head on a new connection, for a body that stopped
arriving, and for as many connections as the process has file descriptors, and keeps an idle
connection an hour; a thousand idle or half-sent connections then lock every client out. The
``ConnectionGuard`` makes each connection earn its place (``SecurityConfig`` holds the knobs):

- **head deadline**: a new connection must send a complete request head within
  ``header_timeout`` seconds (a slowloris sending a byte a second is closed then); later
  requests on a kept-alive connection must start within ``keepalive_timeout``;
- **body deadlines**: a request body must keep up ``body_min_rate`` bytes a second once its first
  ``body_timeout`` seconds have passed: its deadline starts ``body_timeout`` after its head and
  moves on 1 s for each ``body_min_rate`` bytes received, but never more than ``body_timeout``
  ahead of now (a body sent all but a little at once buys no time for a drip after it: a stall
  timer reset by each byte would let a byte every few seconds hold the body until the total
  timeout). A body past that deadline, one with no byte for ``body_timeout`` seconds, and one not
  complete ``body_total_timeout`` seconds after its head, gets 408: the guard sets
  ``bodies.BodyTooSlow`` on its stream, the reader (``bodies.received``) answers and lets go of
  what it held, and the connection is closed after the answer (at the next sweep if the body was
  not being read). While the service itself is not reading a body (aiohttp paused the socket,
  its buffer full) the client is not held behind;
- **connection cap**: at ``max_connections`` open, a new connection first closes one that holds
  no request: the oldest that never sent a whole request head, else the one silent longest
  (a client between two requests keeps its connection); when every one holds a request,
  it is let in on ``reserved_connections`` kept for ``/health`` and for requests that carry
  the API key or the app's confirmation token (``security.guard_middleware`` answers any other
  request there with 503); beyond those it is closed at once.

- **reader deadline**: a response the client stops reading (the socket's send buffer full, the
  transport's writing paused) for ``write_timeout`` seconds closes its connection, which ends the
  request's handler (a stream, a generation) and frees what it held: a client that opens streams
  and never reads them holds nothing for long;

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

from runtime.server.bodies import FREE_BYTES, BodyTooSlow

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
    #: bytes a second a body must keep up after its first ``body_timeout`` seconds; 0: off
    body_min_rate: float = 32 * 1024
    #: seconds a response may wait on a client that does not read it
    write_timeout: float = 60.0


def limits_of(security) -> ConnectionLimits:
    """The limits a ``SecurityConfig`` sets."""
    return ConnectionLimits(security.header_timeout, security.body_timeout, security.body_total_timeout,
                            security.keepalive_timeout, security.max_connections, security.reserved_connections,
                            security.body_min_rate, security.write_timeout)


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
        self.received = 0  #: bytes read from the socket, heads and bodies
        self.body_due = 0.0  #: when the body in progress must have arrived at the minimum rate
        self.counted = 0  #: ``received`` when the deadline last moved
        self.cut_at: float | None = None  #: when the body in progress was refused (408)
        self.late = ""  #: how the body in progress missed its deadline, in words
        self.write_paused_at: float | None = None  #: since when the client has not read what was sent
        self.client_identity: str | None = None  #: ``client_identity``, worked out at its first request

    def pause_writing(self) -> None:
        self.write_paused_at = self._loop.time()
        super().pause_writing()

    def resume_writing(self) -> None:
        self.write_paused_at = None
        super().resume_writing()

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
        self.received += len(data)
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
        """Which deadline this connection missed, if any: ``head``, ``reader`` (its client has
        not read for ``write_timeout``), ``body_stalled`` (no byte for ``body_timeout``),
        ``body_slow`` (behind the minimum rate, or past the total time; ``late`` says how in
        words), or ``refused`` (a body already refused whose request is not over)."""
        if self.requests == 0 and now - self.opened_at > limits.header_timeout:
            return "head"
        if self.write_paused_at is not None and now - self.write_paused_at > limits.write_timeout:
            return "reader"
        request = self._current_request
        if request is None or request.content.is_eof():
            self.head_at = self.cut_at = None
            return None
        if self.cut_at is not None:
            return "refused"
        wait, rate = limits.body_timeout, limits.body_min_rate
        if self.head_at is None:
            self.head_at, self.body_due, self.counted = now, now + wait, self.received
            return None
        gained, self.counted = self.received - self.counted, self.received
        paused = self._reading_paused  # the service is not reading this body now: its client is not behind
        if paused:
            self.body_due = max(self.body_due, now + wait)
        elif gained and rate > 0:
            self.body_due = max(self.body_due, min(self.body_due + gained / rate, now + wait))
        if not paused and now - self.last_data_at > wait:
            self.late = f"no byte of it came for {wait:g} s"
            return "body_stalled"
        if rate > 0 and now > self.body_due:
            self.late = (f"after its first {wait:g} s a body must keep up {rate / 1024:g} KiB/s, and this one "
                         f"fell {wait:g} s behind")
            return "body_slow"
        if now - self.head_at > limits.body_total_timeout:
            self.late = f"it was not whole {limits.body_total_timeout:g} s after the request's head"
            return "body_slow"
        return None

    def refuse_body(self, now: float) -> None:
        """Refuse the body in progress with 408: its reader answers and lets go of what it held
        (``bodies.received``), and aiohttp closes the connection after the answer."""
        self.cut_at = now
        if self._current_request is not None:
            self._current_request.content.set_exception(BodyTooSlow(f"the request body arrived too slowly: {self.late}"))


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
        if reason == "reader" and conn.transport is not None:
            conn.transport.abort()  # a close would wait for the unread bytes to be sent first: forever
        conn.force_close()

    def sweep(self, now: float) -> None:
        for conn in list(self.open):
            reason = conn.overdue(now, self.limits)
            if reason is None:
                continue
            if reason in ("head", "reader"):
                self._close(conn, reason)
            elif reason != "refused":
                conn.refuse_body(now)
                self.closed[reason] += 1  # answered with 408 by its reader, then closed
            elif conn.cut_at is not None and now - conn.cut_at >= SWEEP_S:
                self.open.pop(conn, None)  # nobody read the body to answer in a sweep: closed without one
                conn.force_close()

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
        # (10 s): a stalled client gets no longer there than a stalled body does. A connection's
        # read window (what aiohttp buffers of a body before it stops reading the socket: twice
        # ``read_bufsize``, and one inflater step of it) is outside the body budget: 64 KiB (the
        # bytes of each body the budget does not count) rather than aiohttp's 256 KiB, about
        # 100 MiB at the connection cap rather than 400
        kwargs.setdefault("read_bufsize", FREE_BYTES)
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
