"""Unloading an idle model after its keep-alive (Ollama's ``keep_alive``; ``--keep-alive``).

Each resident model has its own keep-alive: how long it stays loaded after its last request
ends, set by every request for it (its ``keep_alive``, else what the model had, first the
service default) or by ``POST /hearth/models/{id}/load``. A background task stops the engine
worker of each model idle for that long (its memory goes back to the system); the next
request loads it again. A negative keep-alive, or a pin, keeps the model loaded.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator

from aiohttp import web

from runtime.server.errors import bad_request

log = logging.getLogger("hearth.keep_alive")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
MAX_SECONDS = 10 * 365 * 24 * 3600.0


def parse_keep_alive(value: object) -> float | None:
    """Ollama's ``keep_alive``: seconds as a number, or a Go duration string ("5m", "1h30m",
    "-1"); negative means forever. None when absent. Raises a 400 ``ApiError`` otherwise."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise bad_request("'keep_alive' must be a number of seconds or a duration such as \"5m\"", "keep_alive")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        sign = -1.0 if text.startswith("-") else 1.0
        body = text.lstrip("+-")
        try:
            seconds = sign * float(body)
        except ValueError:
            parts = _PART.findall(body)
            if not body or "".join(n + u for n, u in parts) != body:
                raise bad_request(f"'keep_alive' {value!r} is not a duration such as \"5m\", \"1h\" or \"-1\"",
                                  "keep_alive") from None
            seconds = sign * sum(float(n) * _UNITS[u] for n, u in parts)
    else:
        raise bad_request("'keep_alive' must be a number of seconds or a duration such as \"5m\"", "keep_alive")
    if seconds != seconds:  # NaN
        raise bad_request("'keep_alive' must be a number", "keep_alive")
    return -1.0 if seconds < 0 else min(seconds, MAX_SECONDS)


class KeepAlive:
    """The reaper: every ``tick`` seconds, unloads the resident models whose keep-alive ran out."""

    def __init__(self, default: float, tick: float = 0.5) -> None:
        self.default = default
        self.tick = tick

    async def run(self, manager) -> None:
        while True:
            await asyncio.sleep(self.tick)
            for r in [r for r in manager.router.residents if r.engine.alive and r.expired()]:
                try:
                    # checked again under the router's lock: a request may have taken it meanwhile
                    if await manager.router.unload(r.model_id, when=lambda x, r=r: x is r and x.expired()):
                        log.info("unloaded %s after %.0f s without requests", r.model_id, r.keep_alive)
                except Exception:  # a failing stop must not end the reaper
                    log.exception("could not unload %s", r.model_id)


KEEP_ALIVE = web.AppKey("keep_alive", KeepAlive)


async def keep_alive_ctx(app: web.Application) -> AsyncIterator[None]:
    from runtime.server.app_keys import MANAGER

    task = asyncio.create_task(app[KEEP_ALIVE].run(app[MANAGER]))
    yield
    task.cancel()
