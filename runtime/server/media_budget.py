"""The media one client has being prepared at once, held against a per-client budget.

A request's media cost (pixels, seconds of audio: ``runtime.media_costs``, estimated from the
headers) is held for its client (``security.client_id``) from the moment its generation starts
(before the model is looked up or loaded) until the worker has prepared them: decoded, laid
out and run through the projector, when the engine accepts the request
(``media_held`` around ``generation.start_generation`` and ``count_prompt_tokens``). A web
address's image is added once it is fetched. A client that already holds media and would pass
``CLIENT_PIXELS`` or ``CLIENT_AUDIO_SECONDS`` with this request gets 429 with Retry-After; its
first request is always taken (the per-request limits bound it), and a request without media
is never refused here. Other clients are not affected: each has its own share. The worker
prepares one request's media at a time, so one client's share is what it can make the others
wait for.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from aiohttp import web

from runtime.media import MAX_REQUEST_AUDIO_SECONDS, MAX_REQUEST_PIXELS, Media
from runtime.media_costs import MediaCost, MediaTooLarge, request_cost
from runtime.server.errors import ApiError
from runtime.server.security import client_id

#: one client's media being prepared at once: one request of the largest size
CLIENT_PIXELS = MAX_REQUEST_PIXELS
CLIENT_AUDIO_SECONDS = MAX_REQUEST_AUDIO_SECONDS


class MediaBudget:
    """Media cost held now, by client, against the per-client limits."""

    def __init__(self, pixels: int = CLIENT_PIXELS, seconds: float = CLIENT_AUDIO_SECONDS) -> None:
        self.pixels, self.seconds = pixels, seconds
        self.held: dict[str, MediaCost] = {}
        self.refused: Counter[str] = Counter()

    def take(self, who: str, cost: MediaCost) -> None:
        """Hold ``cost`` for ``who``, or raise the 429 that says why not."""
        if not cost:
            return
        mine = self.held.get(who)
        if mine is not None and not (mine + cost).within(self.pixels, self.seconds):
            self.refused["client_media_budget"] += 1
            raise ApiError(429, f"this client's media being prepared already hold {mine} and this request's need "
                                f"{cost}; one client may have {self.pixels:,} pixels and {self.seconds:,.0f} s of audio "
                                "being prepared at once: retry when its other request has started",
                           type="rate_limit_error", code="client_media_budget", headers={"Retry-After": "1"})
        self.held[who] = cost if mine is None else mine + cost

    def give(self, who: str, cost: MediaCost) -> None:
        if not cost:
            return
        left = self.held.get(who, MediaCost()) - cost
        if left.pixels > 0 or left.seconds > 1e-6:  # (sums of seconds leave float dust)
            self.held[who] = left
        else:
            self.held.pop(who, None)

    def stats(self) -> dict:
        total = sum(self.held.values(), MediaCost())
        return {"held_pixels": total.pixels, "held_audio_seconds": total.seconds, "clients": len(self.held),
                "client_pixels": self.pixels, "client_audio_seconds": self.seconds, "refused": sum(self.refused.values())}


MEDIA_BUDGET = web.AppKey("media_budget", MediaBudget)


def checked_cost(media: list[Media] | None, param: str = "image_url") -> MediaCost:
    """The estimated cost of a request's media, or a 400 naming the limit passed (the wire
    formats check each medium where it is read and name its field: this is the check for
    images fetched from a web address)."""
    try:
        return request_cost(media)
    except MediaTooLarge as e:
        raise ApiError(400, str(e), param=param, code="invalid_media") from None


class Held:
    """The cost one request holds for its client; ``update`` takes more once media arrive."""

    def __init__(self, budget: MediaBudget | None, who: str) -> None:
        self.budget, self.who = budget, who
        self.cost = MediaCost()

    def update(self, media: list[Media] | None) -> None:
        """Hold the cost of ``media`` (the request's whole list, after a fetch) in place of the
        cost held so far; a 400 where they pass a request's limit, 429 a client's."""
        cost = checked_cost(media)
        if self.budget is not None:
            self.budget.take(self.who, cost - self.cost)
        self.cost = cost

    def release(self) -> None:
        if self.budget is not None:
            self.budget.give(self.who, self.cost)
        self.cost = MediaCost()


@contextmanager
def media_held(request: web.Request, media: list[Media] | None) -> Iterator[Held]:
    """Hold the cost of ``media`` for the request's client while the block runs."""
    held = Held(request.app.get(MEDIA_BUDGET), client_id(request))
    held.update(media)
    try:
        yield held
    finally:
        held.release()
