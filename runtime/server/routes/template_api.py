"""A model's chat template: which one it renders with, and the user's replacement for it.

``GET /hearth/models/{id}/template``: the template in effect (``origin``: the model's own, the
one stored for it, or ``--chat-template-file`` for the default model), with the BOS and EOS
text it is given and, while the model is loaded, the output contract its worker derived.
``PUT`` stores a replacement (``{"template": "..."}``) after rendering the probe conversation
with it (a template that does not render is a 400 saying why); ``DELETE`` goes back to the
model's own. Both are the user's act (the API key or the app's confirmation token), and a
loaded, idle model is unloaded so that its next request loads it with the new template (a busy
one keeps the old one until it is next loaded).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from runtime.chat.contract_summary import contract_dict
from runtime.chat.template_check import TemplateRefused, check_template
from runtime.server.app_keys import CONFIG, MANAGER
from runtime.server.errors import ApiError, bad_request
from runtime.server.generate.generation import model_error
from runtime.server.security import require_user_act
from runtime.store.model_templates import gguf_template, remove_template, store_template, template_for
from runtime.store.resolve import ResolvedModel

INVALID = "invalid_chat_template"


async def _model(request: web.Request) -> ResolvedModel:
    try:
        return await request.app[MANAGER].resolve_async(request.match_info["id"])
    except Exception as e:
        raise model_error(e) from None


async def _describe(request: web.Request, model: ResolvedModel) -> dict:
    manager = request.app[MANAGER]

    def read() -> dict:
        t = template_for(request.app[CONFIG].data_dir, model.id, model.path, manager.given_template(model))
        return {"id": model.id, "template": t.source, "origin": t.origin, "bos": t.bos, "eos": t.eos}

    try:
        out = await asyncio.to_thread(read)
    except (OSError, ValueError) as e:  # a file that is not GGUF, an unreadable stored template
        raise model_error(e) from None
    resident = manager.router.find(model.id)
    loaded = resident.engine.loaded if resident is not None and resident.engine.alive else None
    # the worker's derivation, not one made here: it renders the template many times
    out["contract"] = contract_dict(loaded.contract) if loaded is not None and loaded.contract is not None else None
    return out


async def get_template(request: web.Request) -> web.Response:
    return web.json_response(await _describe(request, await _model(request)))


async def _text(request: web.Request) -> str:
    from runtime.server.validation import read_json

    body = await read_json(request)
    text = body.get("template") if isinstance(body, dict) else None
    if not isinstance(text, str):
        raise bad_request("the body must be {\"template\": \"<the Jinja chat template>\"}", "template")
    return text


async def put_template(request: web.Request) -> web.Response:
    require_user_act(request, "replacing a model's chat template",
                     "load the file in the app's model settings, or use `hearth serve --chat-template-file`",
                     "template_not_confirmed")
    text = await _text(request)
    model = await _model(request)

    def check_and_store() -> None:
        own = gguf_template(model.path)
        check_template(text, own.bos, own.eos)
        store_template(request.app[CONFIG].data_dir, model.id, text)

    try:
        await asyncio.to_thread(check_and_store)
    except TemplateRefused as e:
        raise ApiError(400, f"the template cannot replace {model.id}'s: {e}", param="template", code=INVALID) from None
    except ValueError as e:  # not a GGUF model
        raise model_error(e) from None
    return await _changed(request, model)


async def delete_template(request: web.Request) -> web.Response:
    require_user_act(request, "replacing a model's chat template", "use the app's model settings",
                     "template_not_confirmed")
    model = await _model(request)
    removed = await asyncio.to_thread(remove_template, request.app[CONFIG].data_dir, model.id)
    return await _changed(request, model, removed=removed)


async def _changed(request: web.Request, model: ResolvedModel, **extra: bool) -> web.Response:
    unloaded = await request.app[MANAGER].unload(model.id, only_idle=True)
    return web.json_response({**await _describe(request, model), **extra, "unloaded": unloaded})


ROUTES = [
    ("GET", "/hearth/models/{id:.+}/template", get_template),
    ("PUT", "/hearth/models/{id:.+}/template", put_template),
    ("DELETE", "/hearth/models/{id:.+}/template", delete_template),
]
