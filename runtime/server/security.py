"""The service's gatekeeping, as aiohttp middlewares.

``cors_middleware`` (outermost): browsers may call the API only from localhost origins and
the ones the user added (``--cors-origin``); never a wildcard. A preflight from an allowed
origin is answered here; a request from any other origin is refused (403) and gets no
``Access-Control-Allow-Origin``, so a web page cannot drive the service either way.

``guard_middleware`` (inside the error middleware, so its refusals are in the API's format):
503 while the service stops; 403 for a Host that is not loopback while bound to loopback
(DNS rebinding); 401 without the API key when one is set (all routes but /health; sent as
``Authorization: Bearer`` or as Anthropic's ``x-api-key``); 413 for
a body over the limit; 429 with Retry-After when one client (address and Origin) already
has too many generation requests in flight (other routes are not counted).
"""

from __future__ import annotations

from collections import Counter
from urllib.parse import urlsplit

from aiohttp import web

from runtime.api_key import is_loopback, request_key_matches
from runtime.server.app_keys import CONFIG
from runtime.server.errors import ApiError

OPEN_PATHS = frozenset({"/health", "/hearth/identity"})
#: the routes that count against a client's in-flight limit: the ones that run the model.
#: A web page can make simple GETs to the service without CORS (an <img>, no Origin header);
#: those must not use up the desktop app's share. New generation routes are added here.
GENERATION_PATHS = {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
                    "/v1/messages/count_tokens", "/api/chat", "/api/generate",
                    "/v1/embeddings", "/api/embed", "/api/embeddings", "/v1/rerank", "/rerank"}
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
ALLOW_METHODS = "GET, POST, DELETE, OPTIONS"
ALLOW_HEADERS = "Authorization, Content-Type, x-api-key, anthropic-version"
STOPPING = web.AppKey("stopping", dict)
LIMITER = web.AppKey("client_limiter", Counter)


def origin_allowed(origin: str, extra: tuple[str, ...] | list[str]) -> bool:
    if origin in extra:
        return True
    try:
        parts = urlsplit(origin)
        host = parts.hostname
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        return False
    return (parts.scheme in ("http", "https") and host is not None
            and (host in LOOPBACK_NAMES or host.endswith(".localhost"))
            and not parts.username and parts.path in ("", "/"))


def _grant(response: web.StreamResponse, origin: str) -> None:
    response.headers["Access-Control-Allow-Origin"] = origin
    response.headers["Access-Control-Expose-Headers"] = "Retry-After"
    response.headers.add("Vary", "Origin")


@web.middleware
async def cors_middleware(request: web.Request, handler) -> web.StreamResponse:
    origin = request.headers.get("Origin")
    if origin is None:
        return await handler(request)
    if not origin_allowed(origin, request.app[CONFIG].security.cors_origins):
        return ApiError(403, f"cross-origin requests from {origin} are not allowed; "
                             "add the origin with --cors-origin", code="origin_not_allowed").response(request.path)
    if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
        response = web.Response(status=204, headers={
            "Access-Control-Allow-Methods": ALLOW_METHODS,
            "Access-Control-Allow-Headers": request.headers.get("Access-Control-Request-Headers", ALLOW_HEADERS),
            "Access-Control-Max-Age": "600"})
        _grant(response, origin)
        return response
    return await handler(request)  # the grant is added by ``grant_on_prepare``, streams included


async def grant_on_prepare(request: web.Request, response: web.StreamResponse) -> None:
    origin = request.headers.get("Origin")
    if (origin is not None and "Access-Control-Allow-Origin" not in response.headers
            and origin_allowed(origin, request.app[CONFIG].security.cors_origins)):
        _grant(response, origin)


def request_hostname(request: web.Request) -> str:
    try:
        return urlsplit("//" + (request.host or "")).hostname or ""
    except ValueError:
        return ""


def host_is_loopback(request: web.Request) -> bool:
    host = request_hostname(request)
    return host in LOOPBACK_NAMES or host.endswith(".localhost")


def client_id(request: web.Request) -> tuple[str, str]:
    """Who a request counts against: its address and its Origin (a browser page's requests
    do not share the quota of the app on the same machine)."""
    return request.remote or "?", request.headers.get("Origin", "")


@web.middleware
async def guard_middleware(request: web.Request, handler) -> web.StreamResponse:
    config = request.app[CONFIG].security
    path = request.path
    if request.app[STOPPING].get("stopping"):
        raise ApiError(503, "the service is shutting down", type="server_error", code="shutting_down")
    if is_loopback(config.host) and path not in OPEN_PATHS:
        if not host_is_loopback(request):
            host = request_hostname(request)
            raise ApiError(403, f"this service is bound to loopback and answers only to localhost, not {host!r}",
                           code="host_not_allowed")
    if config.api_key and path not in OPEN_PATHS and not request_key_matches(
            request.headers.get("Authorization"), request.headers.get("x-api-key"), config.api_key):
        missing = "Authorization" not in request.headers and "x-api-key" not in request.headers
        raise ApiError(401, "this service needs an API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>' "
                            "(`hearth key` prints it)"
                       if missing else "the API key is not valid", type="authentication_error",
                       code="missing_api_key" if missing else "invalid_api_key",
                       headers={"WWW-Authenticate": "Bearer"})
    if request.content_length is not None and request.content_length > config.max_body_bytes:
        raise ApiError(413, f"the request body is {request.content_length} bytes; the limit is "
                            f"{config.max_body_bytes}", code="body_too_large")
    if path not in GENERATION_PATHS:
        return await handler(request)
    counts = request.app[LIMITER]
    who = client_id(request)
    if counts[who] >= config.max_client_requests:
        raise ApiError(429, f"this client already has {counts[who]} requests in flight or queued (the limit is "
                            f"{config.max_client_requests}); retry when one finishes", type="rate_limit_error",
                       code="too_many_requests", headers={"Retry-After": "1"})
    counts[who] += 1
    try:
        return await handler(request)
    finally:
        counts[who] -= 1
        if counts[who] <= 0:
            del counts[who]
