"""The service's local models: one listing and one delete policy for every API.

``/v1/models``, Ollama's ``/api/tags`` and ``/hearth/models`` list the same models
(``local_models``): the embedded ones (listed before their file is placed in the data
directory: the first use places it), the downloaded and imported ones (the store's
``Registry``), and any resident model that is none of those (a file a request named by path).
Each is a ``runtime.store.registry.LocalModel``.

``DELETE /hearth/models/{id}`` and Ollama's ``DELETE /api/delete`` delete the same way
(``delete_local``): a model that is loaded and idle is unloaded first, then its files are
deleted (an imported one is only forgotten). A model that is answering requests (409
``model_in_use``) or pinned (409 ``model_pinned``: unload it first) is left alone, and an
embedded model, which ships with Hearth, cannot be deleted (400 ``model_embedded``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web

from runtime.server.app_keys import CONFIG, MANAGER
from runtime.server.errors import ApiError
from runtime.store.catalog import load_catalog
from runtime.store.gguf_names import quant_of
from runtime.store.registry import LocalModel, ModelNotFound, Registry


def _listing(data_dir: Path, resident: list[tuple[str, str]]) -> list[LocalModel]:
    reg = Registry(data_dir)
    models = reg.models()
    placed = {m.id for m in models}
    models = [reg.embedded_model(e) for e in load_catalog().values()
              if e.embedded is not None and e.id not in placed] + models
    known = {m.id for m in models}
    for model_id, path in resident:
        if model_id not in known:
            p = Path(path)
            size = p.stat().st_size if p.is_file() else 0
            models.append(LocalModel(model_id, p.name, "file", path, size, quant_of(p.name), None, p.name))
            known.add(model_id)
    return models


async def local_models(app: web.Application) -> list[LocalModel]:
    """Every local model, and every resident one (the registry is read in a thread)."""
    resident = [(r.model_id, r.path) for r in app[MANAGER].router.residents]
    return await asyncio.to_thread(_listing, app[CONFIG].data_dir, resident)


async def delete_local(app: web.Application, model_id: str) -> dict:
    """Delete a local model under the one policy (see the module's docstring); returns
    ``{"id", "freed_bytes", "note"}``, with ``unloaded`` when a loaded engine was stopped."""
    manager = app[MANAGER]
    reg = Registry(app[CONFIG].data_dir)
    try:
        model = await asyncio.to_thread(reg.find, model_id)
    except ModelNotFound as e:
        raise ApiError(404, str(e), param="model", code="model_not_found") from None
    if model.source == "embedded":
        raise ApiError(400, f"{model.id} ships with Hearth and cannot be deleted", param="model",
                       code="model_embedded")
    resident = [r for r in manager.router.residents if r.model_id == model.id]
    if any(r.pinned for r in resident):
        raise ApiError(409, f"{model.id} is pinned: unload it (POST /hearth/models/{model.id}/unload) before "
                            "deleting it", code="model_pinned")
    if any(r.busy for r in resident):
        raise ApiError(409, f"{model.id} is answering requests; delete it when they finish", code="model_in_use")
    unloaded = await manager.unload(model.id, only_idle=True) if resident else []
    if any(r.model_id == model.id for r in manager.router.residents):  # a request came in meanwhile
        raise ApiError(409, f"{model.id} is answering requests; delete it when they finish", code="model_in_use")
    try:
        result = await asyncio.to_thread(reg.delete, model.id)
    except ModelNotFound as e:
        raise ApiError(404, str(e), param="model", code="model_not_found") from None
    finally:
        manager.forget_resolved()
    return {**result, "unloaded": bool(unloaded)}
