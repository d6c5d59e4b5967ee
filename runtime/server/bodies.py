"""Request bodies, read so that nobody can hold the service's memory with them.

A body is read a piece at a time from the connection (``received``), never with aiohttp's
``request.read()``, under three limits:

- **the body limit, after decompression**: a body sent with ``Content-Encoding`` gzip, deflate
  (or br, zstd where their decoders are installed) is inflated by aiohttp's parser in steps of
  its read window (256 KiB) as it is read, with flow control between them; the inflated bytes are
  counted as they come and the body gets 413 as soon as they pass ``max_body_bytes``, so a
  small body that inflates a thousandfold never holds more than the limit. (``request.read()``
  raises the stream's window to the whole body limit first, so each step of the inflater could
  produce that much: 272 MiB held before a 413 for a 254 KiB gzip body.)
- **the budget**: every body being received and parsed holds its bytes in a service-wide
  ``BodyBudget`` (``body_budget_bytes``), of which one client (``security.client_id``: the peer's
  address, as for the in-flight limit) may hold ``client_body_bytes``. A body's declared length
  is taken before any of it is read, so one that would pass a limit is refused at once: 429 for
  the client's share, 503 for the service's; a body of unknown length (chunked, compressed) takes
  its bytes as they come and is refused when it would pass. A body's first ``FREE_BYTES`` are not
  counted: every connection may hold that much in aiohttp's read window anyway, and a client's
  small requests then go through while large uploads have spent the budget.
- **the minimum rate**: ``runtime.server.connections`` watches every body that is arriving and
  sets ``BodyTooSlow`` on the stream of one that falls behind; the reader here turns it into a
  408 and lets go of what the body held.

After a refusal the rest of a body is not read: aiohttp's lingering read (which would inflate
the rest of a compressed body to drop it) ends at once on ``BodyRefused``, a ``TimeoutError``
as ``BodyTooSlow`` is, and the connection is closed after the answer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import hdrs, web
from aiohttp.web_protocol import RequestPayloadError

from runtime.server.errors import ApiError
from runtime.server.security import client_id

#: bytes of each body that the budget does not count (aiohttp's read window per connection)
FREE_BYTES = 64 * 1024
#: the encodings aiohttp's parser inflates
INFLATED = frozenset({"gzip", "deflate", "br", "zstd"})


class BodyTooSlow(TimeoutError):
    """Set on a request's body stream by the connection guard when the body falls behind the
    minimum rate or its total time; its text says which. A ``TimeoutError``: aiohttp's lingering
    read after the answer then ends at once, without reading on or logging."""


class BodyRefused(TimeoutError):
    """Set on a refused body's stream so that aiohttp does not read (inflate) the rest of it."""


class BodyBudget:
    """Request-body bytes held now, in all and by client, against the two limits."""

    def __init__(self, total: int, per_client: int) -> None:
        self.total, self.per_client = total, per_client
        self.used = 0
        self.clients: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()  #: refusals by code, for the stats

    def take(self, who: str, n: int) -> None:
        """Hold ``n`` more bytes for ``who``, or raise the 429 / 503 that says why not."""
        mine = self.clients[who]
        if mine + n > self.per_client:
            self.refused["client_body_budget"] += 1
            raise ApiError(429, f"this client's request bodies being received already hold {mine} bytes and this one "
                                f"needs {n} more; one client may hold {self.per_client} at once: retry when one is done",
                           type="rate_limit_error", code="client_body_budget", headers={"Retry-After": "1"})
        if self.used + n > self.total:
            self.refused["body_budget"] += 1
            raise ApiError(503, f"the request bodies being received hold {self.used} of the {self.total} bytes the "
                                f"service keeps for them and this one needs {n} more; retry shortly",
                           type="server_error", code="body_budget", headers={"Retry-After": "1"})
        self.clients[who] = mine + n
        self.used += n

    def give(self, who: str, n: int) -> None:
        self.used -= n
        left = self.clients[who] - n
        if left > 0:
            self.clients[who] = left
        else:
            self.clients.pop(who, None)

    def stats(self) -> dict:
        return {"held_bytes": self.used, "budget_bytes": self.total, "client_budget_bytes": self.per_client,
                "clients": len(self.clients), "refused": dict(self.refused)}


BUDGET = web.AppKey("body_budget", BodyBudget)


def budget_of(security) -> BodyBudget:
    """The budget a ``SecurityConfig`` sets: room for one body of the limit at least, in all and
    for each client."""
    one = max(0, security.max_body_bytes - FREE_BYTES)
    total = max(security.body_budget_bytes, one)
    return BodyBudget(total, min(total, max(security.client_body_bytes, one)))


def _encoding(request: web.Request) -> str | None:
    value = request.headers.get(hdrs.CONTENT_ENCODING, "").strip().lower()
    return value if value in INFLATED else None


@asynccontextmanager
async def received(request: web.Request) -> AsyncIterator[bytearray]:
    """The whole body (inflated), held against the budget until the block ends (parse it there).
    Raises the API's 408, 413, 429, 503 or 400 (a body that does not inflate)."""
    limit = request.client_max_size
    budget = request.app.get(BUDGET)
    who = client_id(request)
    encoding = _encoding(request)
    stream = request.content
    held = 0

    def hold(size: int) -> None:
        nonlocal held
        want = size - FREE_BYTES
        if budget is not None and want > held:
            budget.take(who, want - held)
            held = want

    body = bytearray()
    try:
        try:
            if request.content_length:  # before a byte is read (compressed: what it inflates to at least)
                hold(min(request.content_length, limit))
            while chunk := await stream.readany():
                size = len(body) + len(chunk)
                if size > limit:
                    raise ApiError(413, f"the request body inflates ({encoding}) past the limit of {limit} bytes"
                                   if encoding else f"the request body is over the limit of {limit} bytes",
                                   code="body_too_large")
                hold(size)
                body += chunk
        except BodyTooSlow as e:
            raise ApiError(408, str(e), code="body_too_slow", headers={"Connection": "close"}) from None
        except RequestPayloadError as e:
            raise ApiError(400, f"the request body could not be read ({encoding or 'as sent'}): {e}",
                           code="bad_body") from None
        except ApiError:
            if encoding and not stream.is_eof():  # the rest would be inflated only to be dropped
                stream.set_exception(BodyRefused())
            raise
        yield body
    finally:
        if held and budget is not None:
            budget.give(who, held)
