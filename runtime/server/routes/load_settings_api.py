"""A model's load settings: its context, GPU layers and KV cache type, kept for it
(``runtime.store.model_settings``).

``GET /hearth/models/{id}/settings``: what is stored (null: the service's choice) and, while the
model is loaded, what it was loaded with (``loaded``: context, GPU layers, KV type). ``PUT`` stores
new settings (each field optional; null or absent: the service's choice; a value out of range is
a 400 naming the field) and ``DELETE`` forgets them; both are the user's act (the API key or the
app's confirmation token), and a loaded, idle model is unloaded so that its next request loads it
with them (a busy one keeps its settings until it is next loaded).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from runtime.engine.client import EngineClient
from runtime.server.app_keys import CONFIG, MANAGER
from runtime.server.errors import ApiError
from runtime.server.generate.generation import model_error
from runtime.server.security import require_user_act
from runtime.server.validation import read_json
from runtime.store.model_settings import BadLoadSettings, parse_settings, remove_settings, store_settings
from runtime.store.resolve import ResolvedModel


async def _model(request: web.Request) -> ResolvedModel:
    try:
        return await request.app[MANAGER].resolve_async(request.match_info["id"])
    except Exception as e:
        raise model_error(e) from None


async def _describe(request: web.Request, model: ResolvedModel, **extra) -> web.Response:
    manager = request.app[MANAGER]
    stored = await manager.load_settings(model)
    loaded = None
    for r in manager.router.residents:
        if r.model_id == model.id and r.engine.alive and isinstance(r.engine, EngineClient):  # a local model's worker
            spec = r.engine.spec
            loaded = {"ctx": spec.engine.ctx, "gpu_layers": spec.n_gpu_layers, "kv_type": spec.engine.kv_type}
    return web.json_response({"id": model.id, "settings": stored.to_dict(), "loaded": loaded, **extra})


async def get_settings(request: web.Request) -> web.Response:
    return await _describe(request, await _model(request))


def _confirm(request: web.Request) -> None:
    require_user_act(request, "changing how a model is loaded", "use the app's model settings",
                     "settings_not_confirmed")


async def put_settings(request: web.Request) -> web.Response:
    _confirm(request)
    body = await read_json(request)
    try:
        settings = parse_settings(body)
    except BadLoadSettings as e:
        raise ApiError(400, str(e), param=e.field, code="invalid_settings") from None
    model = await _model(request)
    manager = request.app[MANAGER]
    await asyncio.to_thread(store_settings, request.app[CONFIG].data_dir, model.id, settings)
    manager.forget_load_settings(model.id)
    unloaded = await manager.unload(model.id, only_idle=True)
    return await _describe(request, model, unloaded=unloaded)


async def delete_settings(request: web.Request) -> web.Response:
    _confirm(request)
    model = await _model(request)
    manager = request.app[MANAGER]
    removed = await asyncio.to_thread(remove_settings, request.app[CONFIG].data_dir, model.id)
    manager.forget_load_settings(model.id)
    unloaded = await manager.unload(model.id, only_idle=True)
    return await _describe(request, model, removed=removed, unloaded=unloaded)


ROUTES = [
    ("GET", "/hearth/models/{id:.+}/settings", get_settings),
    ("PUT", "/hearth/models/{id:.+}/settings", put_settings),
    ("DELETE", "/hearth/models/{id:.+}/settings", delete_settings),
]
