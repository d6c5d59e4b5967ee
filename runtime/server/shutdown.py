"""Stopping the service on SIGTERM without leaving a client with a cut-off stream.

New requests get 503 and the listening socket closes at once; generation requests in flight
get ``shutdown_grace`` seconds to finish; whatever still runs is then ended through the engine
client (``ServiceStopping``), so each open stream writes its proper end (an error event and
``[DONE]``, or a final NDJSON line) before the connections close and the worker stops. The
download manager closes too, which ends its event feeds and pull progress streams.
"""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from runtime.engine.client import ServiceStopping
from runtime.server.app_keys import CONFIG, MANAGER
from runtime.server.security import LIMITER, STOPPING


async def graceful_stop(app: web.Application, runner: web.AppRunner) -> None:
    app[STOPPING]["stopping"] = True
    for site in list(runner.sites):
        await site.stop()
    manager, grace = app[MANAGER], app[CONFIG].shutdown_grace
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _busy(app):
        await asyncio.sleep(0.05)
    for r in manager.router.residents:
        if r.busy:
            r.engine.fail_all(ServiceStopping("the service is shutting down; the request was ended early"))
    if manager.remotes is not None:  # requests at upstreams end the same way
        manager.remotes.fail_all(ServiceStopping("the service is shutting down; the request was ended early"))
    # Download event feeds and pull progress streams end when the download manager closes
    # (unfinished downloads are recorded and resume on the next start).
    from runtime.server.routes.store_api import DOWNLOADS

    if DOWNLOADS in app:
        await app[DOWNLOADS].close()
    # handlers now write their last frame; give them a moment before connections close
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and app[LIMITER].generations_in_flight():
        await asyncio.sleep(0.02)
    await runner.cleanup()


def _busy(app: web.Application) -> bool:
    """Generation requests still running (long-lived event feeds do not count: they never end)."""
    remotes = getattr(app[MANAGER], "remotes", None)
    return any(r.busy for r in app[MANAGER].router.residents) or (remotes is not None and remotes.busy())
