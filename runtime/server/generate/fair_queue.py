"""Fair queueing between clients, with a budget per client.

Work waits in one queue per client (``security.client_id``: who a request counts against) and
is handed out by least recent service: the next item comes from the client, among those with
work waiting and under their limit of items running, that was served longest ago. A client that
had nothing queued joins as if served when it arrived (behind the clients last served before
then, ahead of those served since), so finishing a job and sending the next gains nothing. So a
client with six slow jobs queued gets one of them run at a time, and another client's job goes
next, whatever order they arrived in.

Every item has a cost (bytes, for the constraint compiler) fixed before it is queued. A client
holds its items' costs from the moment they are queued until they are done; :meth:`FairQueue.refusal`
says why one more would be over the client's budget (items held, cost held). A client with
nothing held is always let in: one item within the per-request limits always gets its turn.

The queue does no I/O and holds no lock: the constraint compiler calls it from its event loop.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class _Client(Generic[T]):
    waiting: deque[tuple[T, int]] = field(default_factory=deque)
    running: int = 0
    held_items: int = 0
    held_cost: int = 0
    #: when it was last served: (the queue's tick, 1) when one of its items last started, or
    #: (the tick, 0) when it arrived with nothing held: an arrival goes before a service at the same tick
    turn: tuple[int, int] = (0, 0)


class FairQueue(Generic[T]):
    """Items queued per client and handed out by least recent service (see the module doc).

    ``max_items`` / ``max_cost``: what one client may hold (queued or running); ``max_running``:
    how many of one client's items may run at once (the others wait even when a runner is free,
    so other clients always find one)."""

    def __init__(self, max_items: int, max_cost: int, max_running: int = 1) -> None:
        self.max_items, self.max_cost, self.max_running = max_items, max_cost, max_running
        self._clients: dict[str, _Client[T]] = {}
        self._tick = 0
        self._waiting = 0

    def __len__(self) -> int:
        """Items waiting (not running)."""
        return self._waiting

    def refusal(self, client: str, cost: int) -> str | None:
        """Why ``client`` may not queue one more item of ``cost`` (None: it may)."""
        c = self._clients.get(client)
        if c is None or c.held_items == 0:
            return None
        if c.held_items >= self.max_items:
            return f"this client already has {c.held_items} constraints queued or compiling (the limit is {self.max_items})"
        if c.held_cost + cost > self.max_cost:
            return (f"this client's queued constraints hold {c.held_cost} bytes of schemas and this one "
                    f"{cost} more (the limit is {self.max_cost})")
        return None

    def push(self, client: str, item: T, cost: int) -> None:
        """Queue ``item`` behind the client's others (its budget is the caller's to check first)."""
        c = self._clients.get(client)
        if c is None:
            c = self._clients[client] = _Client(turn=(self._tick, 0))
        c.waiting.append((item, cost))
        c.held_items += 1
        c.held_cost += cost
        self._waiting += 1

    def pop(self) -> tuple[str, T] | None:
        """The next item to run and its client, by least recent service among the clients with
        items waiting and fewer than ``max_running`` running (None: no such client). The item
        counts as running until :meth:`done`."""
        best: tuple[str, _Client[T]] | None = None
        for name, c in self._clients.items():
            if c.waiting and c.running < self.max_running and (best is None or c.turn < best[1].turn):
                best = (name, c)
        if best is None:
            return None
        name, c = best
        item, _ = c.waiting[0]
        c.waiting.popleft()
        c.running += 1
        self._tick += 1
        c.turn = (self._tick, 1)
        self._waiting -= 1
        return name, item

    def done(self, client: str, cost: int) -> None:
        """An item of ``client``'s that :meth:`pop` gave has finished: its cost is let go."""
        c = self._clients[client]
        c.running -= 1
        c.held_items -= 1
        c.held_cost -= cost
        if c.held_items == 0:  # nothing queued or running: forgotten (it comes back as an arrival)
            del self._clients[client]

    def drain(self) -> list[T]:
        """Every waiting item, taken out of the queue (the queue is not used after)."""
        items = [item for c in self._clients.values() for item, _ in c.waiting]
        self._clients.clear()
        self._waiting = 0
        return items

    def held(self, client: str) -> tuple[int, int]:
        """(items, cost) ``client`` holds, queued or running."""
        c = self._clients.get(client)
        return (c.held_items, c.held_cost) if c is not None else (0, 0)
