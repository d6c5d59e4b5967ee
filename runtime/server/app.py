"""The aiohttp application factory: routes in one table, errors in OpenAI's format."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from aiohttp import web

from runtime.config import ServeConfig
from runtime.server import openapi
from runtime.server.app_keys import CONFIG, MANAGER
from runtime.server.bodies import BUDGET, BodyTooSlow, budget_of
from runtime.server.errors import ApiError, http_error
from runtime.server.generate.reply_headers import reply_headers
from runtime.server.media_budget import MEDIA_BUDGET, MediaBudget
from runtime.server.models.keep_alive import KEEP_ALIVE, KeepAlive, keep_alive_ctx
from runtime.server.models.model_manager import ModelManager
from runtime.server.routes import (
    hardware_api, load_settings_api, models_api, quantize_api, service_api, store_api, template_api,
)
from runtime.server.client_ledger import ClientLedger
from runtime.server.security import LIMITER, STOPPING, cors_middleware, grant_on_prepare, guard_middleware
from runtime.server.wire.anthropic import anthropic_api
from runtime.server.wire.ollama import ollama_api
from runtime.server.wire.openai import embeddings_api, openai_api, rerank_api
from runtime.server.wire.responses import responses_api

log = logging.getLogger("hearth.server")

ROUTES = [
    ("GET", "/", service_api.root),
    ("HEAD", "/", service_api.root),
    ("GET", "/health", service_api.health),
    ("GET", "/hearth/identity", service_api.identity_proof),
    ("GET", "/hearth/stats", service_api.stats),
    ("POST", "/hearth/unload", service_api.unload),
    ("GET", "/hearth/hardware", hardware_api.hardware),
    ("GET", "/hearth/fit", hardware_api.fit),
    *models_api.ROUTES,
    *template_api.ROUTES,  # before the store's DELETE /hearth/models/{id:.+}, which would match it
    *load_settings_api.ROUTES,  # likewise
    ("POST", "/v1/chat/completions", openai_api.chat_completions),
    ("POST", "/hearth/count_tokens", openai_api.count_tokens),
    ("POST", "/v1/completions", openai_api.completions),
    *responses_api.ROUTES,
    *anthropic_api.ROUTES,
    *ollama_api.ROUTES,
    *embeddings_api.ROUTES,
    *rerank_api.ROUTES,
    ("GET", "/openapi.json", openapi.document),
    *store_api.ROUTES,
    *quantize_api.ROUTES,
]


@web.middleware
async def error_middleware(request: web.Request, handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as e:
        return e.response(request.path)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return http_error(e).response(request.path)
    except BodyTooSlow as e:  # a body read elsewhere than bodies.received (which answers it the same)
        return ApiError(408, str(e), code="body_too_slow", headers={"Connection": "close"}).response(request.path)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return ApiError(500, "internal server error (see the service log)", type="server_error").response(request.path)


async def _engine_ctx(app: web.Application) -> AsyncIterator[None]:
    manager = app[MANAGER]
    preload = None
    if app[CONFIG].preload:
        preload = asyncio.create_task(_preload(manager))
    yield
    if preload is not None:
        preload.cancel()
    await manager.close()


async def _preload(manager: ModelManager) -> None:
    try:
        await manager.engine_for(None, task=None)  # the default model may be an embedding model
    except Exception as e:  # reported on /health; requests will retry the load
        log.warning("could not load the default model: %s", e)


def create_app(config: ServeConfig) -> web.Application:
    app = web.Application(middlewares=[cors_middleware, error_middleware, guard_middleware],
                          client_max_size=config.security.max_body_bytes)
    app[CONFIG] = config
    app[MANAGER] = ModelManager(config)
    app[KEEP_ALIVE] = KeepAlive(config.residency.keep_alive)
    app[STOPPING] = {}
    app[LIMITER] = ClientLedger(config.security.max_client_requests, config.security.max_client_held)
    app[BUDGET] = budget_of(config.security)  # request-body bytes held at once (runtime/server/bodies.py)
    app[MEDIA_BUDGET] = MediaBudget()  # media being prepared, per client (runtime/server/media_budget.py)
    app[responses_api.RESPONSES] = responses_api.store_for(app)
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, handler)
    from runtime.server.routes import remotes_api as remote_api

    remote_api.install(app)  # upstreams: /hearth/remotes, remote models (none until one is added)
    app.on_response_prepare.append(grant_on_prepare)
    app.on_response_prepare.append(reply_headers)
    app.cleanup_ctx.append(store_api.store_ctx)
    app.cleanup_ctx.append(quantize_api.quantize_ctx)
    app.cleanup_ctx.append(_engine_ctx)
    app.cleanup_ctx.append(keep_alive_ctx)
    return app
