"""/hearth/hardware and /hearth/fit: the probe and the memory-fit planner over HTTP.

Both are GETs and write nothing: a model that is not in the data directory yet (an embedded one
is placed on its first use) is planned from the catalog's numbers, or answered 404 "not yet
available" when the catalog has none."""

from __future__ import annotations

import asyncio

from aiohttp import web

from runtime.server.app_keys import CONFIG, MANAGER
from runtime.server.errors import bad_request
from runtime.server.generate.generation import model_error
from runtime.server.models.model_refs import ModelPathRefused, confinement
from runtime.store.gguf_file import InvalidModelFile
from runtime.hardware.model_shape import model_shape
from runtime.store.resolve import UnknownModel


async def hardware(request: web.Request) -> web.Response:
    info = await request.app[MANAGER].hardware()
    return web.json_response(info.to_dict())


async def fit(request: web.Request) -> web.Response:
    from runtime.hardware.fit import plan_fit

    q = request.query
    config, manager = request.app[CONFIG], request.app[MANAGER]
    ctx = None
    if "ctx" in q:
        if not (q["ctx"].isascii() and q["ctx"].isdigit()) or int(q["ctx"]) < 1:  # ("³".isdigit() is True)
            raise bad_request("'ctx' must be a positive integer", "ctx")
        ctx = int(q["ctx"])
    try:
        ref = q.get("model") or config.model
        hw = await manager.hardware()

        def blocking():  # the header is read, and the plan made, off the event loop
            from runtime.server.models.embed_engines import file_fit

            try:
                encoder = file_fit(manager.resolve(ref).path, hw)
            except UnknownModel:  # not here (or, on this GET, not placed yet): the catalog's numbers below
                encoder = None
            if encoder is not None:  # an embedding or reranking model: the CPU, by its file size
                return encoder
            shape = model_shape(ref, config.data_dir, confinement(config))
            return plan_fit(shape, hw, ctx=ctx, kv_type=q.get("kv_type", config.engine.kv_type),
                            n_seq=config.engine.parallel, n_batch=config.engine.n_batch)

        plan = await asyncio.to_thread(blocking)
    except (UnknownModel, InvalidModelFile, ModelPathRefused) as e:
        raise model_error(e) from None
    except ValueError as e:
        raise bad_request(str(e)) from None
    return web.json_response(plan if isinstance(plan, dict) else plan.to_dict())
