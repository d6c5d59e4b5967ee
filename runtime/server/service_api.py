"""Hearth's own endpoints: /health and /hearth/stats."""

from __future__ import annotations

from dataclasses import asdict

from aiohttp import web

from runtime import __version__
from runtime.server.app_keys import MANAGER


async def health(request: web.Request) -> web.Response:
    """200 while the service runs; ``engine.state`` says whether the worker is up or crashed."""
    return web.json_response({"status": "ok", "service": "hearth", "version": __version__,
                              "engine": request.app[MANAGER].status()})


async def stats(request: web.Request) -> web.Response:
    manager = request.app[MANAGER]
    models = []
    engine = manager.engine
    if engine is not None and engine.alive:
        s = engine.stats
        entry = {"id": engine.model_id, "pid": engine.pid,
                 "n_ctx": engine.loaded.n_ctx if engine.loaded else None,
                 "max_request_tokens": engine.loaded.max_request_tokens if engine.loaded else None}
        if s is not None:
            d = asdict(s)
            kv = {"cells_used": d["kv_cells_used"], "capacity": d["kv_capacity"],
                  "preemptions": d["preemptions"]}
            if d["kv"] is not None:
                kv.update({k: v for k, v in d["kv"].items()})
            entry.update(running=d["running"], waiting=d["waiting"], tokens_generated=d["tokens_generated"],
                         requests_finished=d["requests_finished"], preemptions=d["preemptions"], kv=kv)
            if d.get("spec") is not None:
                entry["spec"] = d["spec"]
        models.append(entry)
    return web.json_response({"requests_served": manager.requests_served, "models": models})


async def unload(request: web.Request) -> web.Response:
    """Unload the running model (requests in flight end with an error); 200 with its id, or null."""
    return web.json_response({"unloaded": await request.app[MANAGER].unload()})
