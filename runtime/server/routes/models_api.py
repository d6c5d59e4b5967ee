"""Which models are loaded, and loading or unloading one: /v1/models, /hearth/models/{id}/load|unload.

A resident model is described the same way everywhere (``describe``): the context it was asked
for and the engine's actual one, its worker, pin and keep-alive, the planner's memory estimate
for it and, for a local worker, the memory the process really holds.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web

from runtime.server.app_keys import MANAGER
from runtime.server.errors import bad_request
from runtime.server.generate.generation import model_error
from runtime.server.models.keep_alive import parse_keep_alive
from runtime.server.timestamps import iso
from runtime.server.models.residency import Resident


def rss(pid: int | None) -> int | None:
    """Resident memory of a worker process (None when it is not local or gone)."""
    import psutil

    if pid is None:
        return None
    try:
        return int(psutil.Process(pid).memory_info().rss)
    except psutil.Error:
        return None


def describe(r: Resident, loads: int) -> dict:
    e = r.engine
    expires = r.expires_at()
    return {"id": r.model_id, "state": "running" if e.alive else "crashed", "pid": e.pid,
            "ctx": r.ctx, "n_ctx": e.loaded.n_ctx if e.loaded else None,
            "max_request_tokens": e.loaded.max_request_tokens if e.loaded else None,
            "pinned": r.pinned, "keep_alive": r.keep_alive,
            "expires_at": iso(expires) if expires is not None else None,
            "loaded_at": iso(r.loaded_at), "loads": loads, "active": e.active if e.alive else 0,
            "memory": {"planned": r.need.to_dict(), "rss_bytes": rss(e.pid)}}


def _context_length(path: Path) -> int | None:
    from runtime.server.models.model_header import header

    try:
        n = header(path).arch_value("context_length")
    except (OSError, ValueError):
        return None
    return int(n) if isinstance(n, int) else None


async def list_models(request: web.Request) -> web.Response:
    """The local models (``local_models``: embedded, downloaded, imported, and any loaded file): whether each is
    loaded, its context length (the engine's per-request limit when loaded, else the trained
    one), its capabilities and, when loaded, its memory."""
    from runtime.server.generate.capabilities import capabilities, catalog_capabilities
    from runtime.server.models.local_models import local_models
    from runtime.store.catalog import load_catalog

    router = request.app[MANAGER].router
    rows = [(m.id, Path(m.path), m.name, "hearth" if m.source == "embedded" else m.source)
            for m in await local_models(request.app)]

    catalog = load_catalog()

    def entry(model_id: str, path: Path, name: str, owner: str) -> dict:
        listed = catalog.get(model_id) if not path.exists() else None  # (an embedded model not placed yet)
        caps = capabilities(path) if listed is None else catalog_capabilities(listed)
        context = _context_length(path) if listed is None else listed.context_length
        d = {"id": model_id, "object": "model", "created": 0, "owned_by": owner, "name": name,
             "capabilities": caps, "loaded": False, "context_length": context}
        r = router.find(model_id)
        if r is not None and r.engine.alive:
            d.update(loaded=True, context_length=r.engine.loaded.max_request_tokens if r.engine.loaded else r.ctx,
                     memory=describe(r, router.loads[model_id])["memory"])
        return d

    data = await asyncio.to_thread(lambda: [entry(*row) for row in rows])
    from runtime.server.routes.remotes_api import remote_model_entries

    data += remote_model_entries(request.app, {d["id"] for d in data})
    return web.json_response({"object": "list", "data": data})


async def _body(request: web.Request) -> dict:
    from runtime.server.validation import read_json

    if not request.can_read_body:
        return {}
    body = await read_json(request)
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return body


def _load_options(body: dict) -> tuple[bool | None, int | None, float | None]:
    pin, ctx = body.get("pin"), body.get("ctx")
    if pin is not None and not isinstance(pin, bool):
        raise bad_request("'pin' must be true or false", "pin")
    if ctx is not None and (isinstance(ctx, bool) or not isinstance(ctx, int) or not 1 <= ctx <= 2**31 - 1):
        raise bad_request("'ctx' must be a whole number of tokens, at least 1", "ctx")
    return pin, ctx, parse_keep_alive(body.get("keep_alive"))


async def load(request: web.Request) -> web.Response:
    """Load a model (or take the resident one) with ``pin`` (never unloaded to make room nor
    by its keep-alive), ``ctx`` and ``keep_alive``; 200 with its description."""
    pin, ctx, keep_alive = _load_options(await _body(request))
    manager = request.app[MANAGER]
    try:
        model = await manager.resolve_async(request.match_info["id"])
        if ctx is None:  # the context the user stored for the model, if any
            ctx = (await manager.load_settings(model)).ctx
        r = await manager.router.acquire(model, ctx, keep_alive, pin)
    except Exception as e:
        raise model_error(e) from None
    return web.json_response(describe(r, manager.router.loads[r.model_id]))


async def unload(request: web.Request) -> web.Response:
    """Unload a model (every context it is loaded at; pinned or not; requests in flight end
    with an error); 200 with the ids unloaded, [] when it was not loaded."""
    manager = request.app[MANAGER]
    try:
        model = await manager.resolve_async(request.match_info["id"])
    except Exception as e:
        raise model_error(e) from None
    return web.json_response({"unloaded": await manager.unload(model.id)})


ROUTES = [
    ("GET", "/v1/models", list_models),
    ("POST", "/hearth/models/{id:.+}/load", load),
    ("POST", "/hearth/models/{id:.+}/unload", unload),
]
