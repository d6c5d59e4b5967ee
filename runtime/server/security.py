"""The service's gatekeeping, as aiohttp middlewares.

``cors_middleware`` (outermost): browsers may call the API only from localhost origins and
the ones the user added (``--cors-origin``); never a wildcard. A preflight from an allowed
origin is answered here; a request from any other origin is refused (403) and gets no
``Access-Control-Allow-Origin``, and so is a request a web page made without an ``Origin``
(an ``<img>``, a link: ``Sec-Fetch-Site`` cross-site or same-site), so a web page cannot
drive the service either way (``cross_site_refusal``).

``guard_middleware`` (inside the error middleware, so its refusals are in the API's format):
503 while the service stops; 403 for a Host that is not loopback while bound to loopback
(DNS rebinding); 401 without the API key when one is set (all routes but /health; sent as
``Authorization: Bearer`` or as Anthropic's ``x-api-key``); 503 on a connection let in on the
reserve (``runtime.server.connections``) unless the request is /health or the app's; 413 for
a body over the limit; 429 with Retry-After when one client (``client_identity``: on loopback
the machine account that owns the connecting socket, never a source address the caller picks)
already holds too many requests of any route, streams included, or too many that run a model
(``client_ledger``). A GET or HEAD runs read-only: it never places a model file
(``runtime.store.resolve.READ_ONLY``).

``require_user_act``: what only the user may do over HTTP (import a file, add an upstream,
name an environment variable as its key) needs the API key or the confirmation token.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from aiohttp import web

from runtime.api_key import is_loopback, request_key_matches
from runtime.import_confirm import CONFIRM_HEADER, confirmed
from runtime.server.app_keys import CONFIG
from runtime.server.client_identity import connection_identity
from runtime.server.client_ledger import ClientLedger
from runtime.server.errors import ApiError
from runtime.store.resolve import READ_ONLY

OPEN_PATHS = frozenset({"/health", "/hearth/identity"})
#: the routes that count against a client's in-flight limit: the ones that run the model.
#: A web page can make simple GETs to the service without CORS (an <img>, no Origin header);
#: those must not use up the desktop app's share. New generation routes are added here.
GENERATION_PATHS = {"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
                    "/v1/messages/count_tokens", "/hearth/count_tokens", "/api/chat", "/api/generate",
                    "/v1/embeddings", "/api/embed", "/api/embeddings", "/v1/rerank", "/rerank"}
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
#: ``Sec-Fetch-Site`` values of requests that no other site made
SAFE_FETCH_SITES = frozenset({"same-origin", "none"})
ALLOW_METHODS = "GET, POST, DELETE, OPTIONS"
ALLOW_HEADERS = "Authorization, Content-Type, x-api-key, anthropic-version"
STOPPING = web.AppKey("stopping", dict)
LIMITER = web.AppKey("client_ledger", ClientLedger)


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


def cross_site_refusal(request: web.Request, allowed: tuple[str, ...] | list[str]) -> ApiError | None:
    """Why a browser request from another site may not use this route (None: it may).

    A page on another origin is refused by its ``Origin``; a request a page makes without one
    (an ``<img>``, a link, a no-cors fetch: a browser sends ``Sec-Fetch-Site``) is refused unless
    the browser says it is ``same-origin`` or typed by the user (``none``). A page of an allowed
    origin (localhost, ``--cors-origin``) sends its ``Origin`` and is let through. Clients that
    are not browsers (the app, SDKs, curl) send neither header."""
    origin = request.headers.get("Origin")
    if origin is not None:
        if origin_allowed(origin, allowed):
            return None
        return ApiError(403, f"cross-origin requests from {origin[:200]} are not allowed; "
                             "add the origin with --cors-origin", code="origin_not_allowed")
    site = request.headers.get("Sec-Fetch-Site")
    if site is None or site.strip().lower() in SAFE_FETCH_SITES or request.path in OPEN_PATHS:
        return None
    return ApiError(403, f"a {site.strip().lower()[:20]} request from a web page (Sec-Fetch-Site) without an allowed "
                         "Origin cannot use this route; call it from the app or an API client, or from a page "
                         "whose origin was added with --cors-origin", code="cross_site_refused")


@web.middleware
async def cors_middleware(request: web.Request, handler) -> web.StreamResponse:
    refusal = cross_site_refusal(request, request.app[CONFIG].security.cors_origins)
    if refusal is not None:
        return refusal.response(request.path)
    origin = request.headers.get("Origin")
    if origin is None:
        return await handler(request)
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


def client_id(request: web.Request) -> str:
    """Who a request counts against (``client_identity``): never a header or a source address,
    which are the caller's to choose, so that none may split one client's share into many."""
    return connection_identity(request.protocol, request.transport)


@web.middleware
async def guard_middleware(request: web.Request, handler) -> web.StreamResponse:
    config = request.app[CONFIG].security
    path = request.path
    if request.app[STOPPING].get("stopping"):
        raise ApiError(503, "the service is shutting down", type="server_error", code="shutting_down")
    if is_loopback(config.host) and path not in OPEN_PATHS:
        if not host_is_loopback(request):
            host = request_hostname(request)
            raise ApiError(403, f"this service is bound to loopback and answers only to localhost, not {host[:100]!r}",
                           code="host_not_allowed")
    if config.api_key and path not in OPEN_PATHS and not request_key_matches(
            request.headers.get("Authorization"), request.headers.get("x-api-key"), config.api_key):
        missing = "Authorization" not in request.headers and "x-api-key" not in request.headers
        raise ApiError(401, "this service needs an API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>' "
                            "(`hearth key` prints it)"
                       if missing else "the API key is not valid", type="authentication_error",
                       code="missing_api_key" if missing else "invalid_api_key",
                       headers={"WWW-Authenticate": "Bearer"})
    if getattr(request.protocol, "reserve_only", False) and path not in OPEN_PATHS and not (
            config.api_key or confirmed_by_token(request)):  # the key was checked above
        raise ApiError(503, f"the service has {config.max_connections} connections open, each holding a request; "
                            "retry shortly (the connections kept beyond them serve /health and the app)",
                       type="server_error", code="too_many_connections",
                       headers={"Retry-After": "1", "Connection": "close"})
    if request.content_length is not None and request.content_length > config.max_body_bytes:
        raise ApiError(413, f"the request body is {request.content_length} bytes; the limit is "
                            f"{config.max_body_bytes}", code="body_too_large")
    # a GET writes nothing (runtime.store.resolve.READ_ONLY): an <img> cannot make the service copy a model
    read_only = READ_ONLY.set(request.method in ("GET", "HEAD"))
    try:
        if path in OPEN_PATHS:
            return await handler(request)
        with request.app[LIMITER].hold(client_id(request), path in GENERATION_PATHS):
            return await handler(request)
    finally:
        READ_ONLY.reset(read_only)


# -- the user's own acts ----------------------------------------------------------------------
def confirmed_by_token(request: web.Request) -> bool:
    """The request comes from this machine and carries the data directory's confirmation token
    (``runtime.import_confirm``): the app sends it after the user acted in its window; a web page
    cannot read it, and a request from another account or machine does not have it."""
    return is_loopback(request.remote or "") and confirmed(request.headers.get(CONFIRM_HEADER),
                                                           request.app[CONFIG].data_dir)


def require_user_act(request: web.Request, what: str, instead: str, code: str, *, token_only: bool = False) -> None:
    """Refuse (403 ``code``) a request that does something only the user may do (import a file,
    add an upstream, name a secret) unless it carries the API key (the guard checked it; not
    enough with ``token_only``) or the confirmation token."""
    if not token_only and request.app[CONFIG].security.api_key:
        return
    if confirmed_by_token(request):
        return
    raise ApiError(403, f"{what} over the API needs the user's confirmation: {instead}, or send {CONFIRM_HEADER} "
                        "with the data directory's confirmation token from this machine", code=code)
