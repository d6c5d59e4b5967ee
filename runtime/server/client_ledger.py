"""What each client holds of the service at once, counted on every route.

A client (``client_identity``) may hold at most ``held_limit`` requests at once, of any route,
streams included (a stream that never ends is held for as long as it is open), and of those at
most ``generation_limit`` on the routes that run a model. A request beyond either gets 429 with
``Retry-After`` before its handler runs, and its connection, now holding nothing, is one the
connection guard may close for another client (``connections``). So one client can keep at most
``held_limit`` of the ``max_connections`` busy, whatever it asks for; the rest stay open to others.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from runtime.server.errors import ApiError


class ClientLedger:
    """The requests each client holds, and the limits on them."""

    def __init__(self, generation_limit: int, held_limit: int) -> None:
        self.generation_limit = generation_limit
        self.held_limit = max(held_limit, generation_limit)
        self.held: Counter[str] = Counter()  #: requests of any route, by client
        self.generating: Counter[str] = Counter()  #: requests that run a model, by client
        self.refused: Counter[str] = Counter()  #: 429s given, by limit

    @contextmanager
    def hold(self, who: str, generation: bool) -> Iterator[None]:
        """Count one request of ``who`` while it runs, or raise the 429 that says which limit it
        would pass."""
        if self.held[who] >= self.held_limit:
            self.refused["held"] += 1
            raise ApiError(429, f"this client already holds {self.held[who]} requests open (streams included; "
                                f"the limit is {self.held_limit}); retry when one ends", type="rate_limit_error",
                           code="too_many_requests", headers={"Retry-After": "1"})
        if generation and self.generating[who] >= self.generation_limit:
            self.refused["generation"] += 1
            raise ApiError(429, f"this client already has {self.generating[who]} requests in flight or queued (the "
                                f"limit is {self.generation_limit}); retry when one finishes",
                           type="rate_limit_error", code="too_many_requests", headers={"Retry-After": "1"})
        self.held[who] += 1
        if generation:
            self.generating[who] += 1
        try:
            yield
        finally:
            _drop(self.held, who)
            if generation:
                _drop(self.generating, who)

    def generations_in_flight(self) -> int:
        return sum(self.generating.values())

    def stats(self) -> dict:
        """For ``/health``: how many clients hold requests, the most one holds, the 429s given."""
        return {"clients": len(self.held), "most_held_by_one": max(self.held.values(), default=0),
                "held_limit": self.held_limit, "generation_limit": self.generation_limit,
                "refused": dict(self.refused)}


def _drop(counts: Counter[str], who: str) -> None:
    counts[who] -= 1
    if counts[who] <= 0:
        del counts[who]
