"""The service's side of remote engines: ``/hearth/remotes`` (list, add, remove, refresh), the
remote models in ``/v1/models`` and ``/api/tags``, the upstreams in ``/health``, and the task
that keeps their model lists current.

These routes sit behind the same middlewares as every other (Hearth's API key, Host check,
CORS, body size), and remote models are served through the same generation routes, so the
per-client limits apply to them too. Nothing is remote until the user adds an upstream: adding
or removing one over HTTP needs the API key or the app's confirmation token, and naming an
environment variable as its key needs the confirmation token (``runtime.server.security``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import AsyncIterator

from aiohttp import web

from runtime.remote.keys import KeyringUnavailable, delete_key, store_key
from runtime.remote.registry import Remotes
from runtime.remote.upstream import ENV_VAR, UpstreamRefused, make_upstream
from runtime.server.app_keys import CONFIG, MANAGER
from runtime.server.errors import ApiError, bad_request
from runtime.server.security import require_user_act

REMOTES = web.AppKey("remotes", Remotes)
#: seconds between two readings of every upstream's /v1/models
REFRESH_S = float(os.environ.get("HEARTH_REMOTE_REFRESH_S", "300"))


def install(app: web.Application) -> Remotes:
    """Give the app its upstreams: routes, the model manager's remote lookup, the refresh task."""
    remotes = Remotes(app[CONFIG].data_dir, REFRESH_S)
    app[REMOTES] = remotes
    app[MANAGER].remotes = remotes
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, handler)
    app.cleanup_ctx.append(_remotes_ctx)
    return remotes


async def _remotes_ctx(app: web.Application) -> AsyncIterator[None]:
    task = asyncio.create_task(app[REMOTES].refresh_forever())
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await app[REMOTES].close()


# -- what other endpoints show --------------------------------------------------------------
def remote_model_entries(app: web.Application, local_ids: set[str]) -> list[dict]:
    """``/v1/models`` entries: ``owned_by`` is the upstream, ``remote`` says where prompts go."""
    if REMOTES not in app:
        return []
    return [{"id": m["id"], "object": "model", "created": 0, "owned_by": m["upstream"], "name": m["id"],
             "engine": "remote", "capabilities": ["completion", "chat"], "loaded": True,
             "context_length": m["context_length"],
             "remote": {"upstream": m["upstream"], "host": m["host"], "url": m["url"],
                        "model": m["upstream_model"], "health": m["health"]}}
            for m in app[REMOTES].model_entries(local_ids)]


def remote_tag_entries(app: web.Application, local_names: set[str]) -> list[dict]:
    """``/api/tags`` entries, with Ollama's own fields for a model served elsewhere
    (``remote_model``, ``remote_host``)."""
    if REMOTES not in app:
        return []
    plain = {n.removesuffix(":latest") for n in local_names}
    out = []
    for m in app[REMOTES].model_entries(plain):
        name = m["id"]
        digest = hashlib.sha256(f"remote:{m['upstream']}:{m['upstream_model']}".encode()).hexdigest()
        out.append({"name": name, "model": name, "modified_at": _iso(m["refreshed_at"]), "size": 0,
                    "digest": digest, "remote_model": m["upstream_model"], "remote_host": m["url"],
                    "details": {"parent_model": "", "format": "remote", "family": "", "families": None,
                                "parameter_size": "", "quantization_level": ""},
                    "engine": "remote", "upstream": m["upstream"]})
    return out


def _iso(ts: float | None) -> str:
    from runtime.server.timestamps import iso, now_iso

    return iso(ts) if ts else now_iso()


def health_summary(app: web.Application) -> list[dict]:
    """``/health``'s ``remotes``: each upstream's state and last error ([] when none is added)."""
    if REMOTES not in app:
        return []
    return [{"name": s["name"], "host": s["host"], "state": s["health"]["state"],
             "last_error": s["health"]["last_error"], "models": len(s["models"])}
            for s in app[REMOTES].status()]


# -- /hearth/remotes ------------------------------------------------------------------------
async def list_remotes(request: web.Request) -> web.Response:
    """The upstreams as last read (a GET contacts none: ``POST .../NAME/refresh`` reads one again)."""
    remotes = request.app[REMOTES]
    return web.json_response({"upstreams": remotes.status(), "models": remotes.model_entries(set())})


def _add_consented(request: web.Request, key_env: str | None) -> None:
    """Only the user introduces a destination or a secret: adding or removing an upstream needs
    the API key or the app's confirmation; naming an environment variable to send needs the
    confirmation itself (a holder of the API key is a client, not the owner of the environment)."""
    if key_env is None:
        require_user_act(request, "changing the remote engines",
                         "add it in the app or run `hearth remote add NAME URL`", "remote_not_confirmed")
    else:
        require_user_act(request, "naming an environment variable as an upstream's key",
                         f"run `hearth remote add NAME URL --key-from-env {key_env}` where the service runs",
                         "key_env_not_confirmed", token_only=True)


def _fields(body: object) -> dict:
    """The checked fields of an add request (400 naming the field)."""
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    api_key, key_env = body.get("api_key"), body.get("key_env")
    if api_key is not None and (not isinstance(api_key, str) or not api_key or len(api_key) > 4096):
        raise bad_request("'api_key' must be a non-empty string of at most 4096 characters", "api_key")
    if key_env is not None and (not isinstance(key_env, str) or not ENV_VAR.fullmatch(key_env)):
        raise bad_request("'key_env' must be the name of an environment variable (letters, digits, '_'; "
                          "at most 128)", "key_env")
    if api_key and key_env:
        raise bad_request("give 'api_key' or 'key_env', not both", "key_env")
    for flag in ("allow_insecure", "plain_names"):
        if not isinstance(body.get(flag, False), bool):
            raise bad_request(f"'{flag}' must be true or false", flag)
    timeouts = body.get("timeouts")
    if timeouts is not None and not isinstance(timeouts, dict):
        raise bad_request("'timeouts' must be an object of connect, first_byte and idle seconds", "timeouts")
    return {"name": body.get("name"), "url": body.get("url"), "api_key": api_key, "key_env": key_env,
            "allow_insecure": body.get("allow_insecure", False), "plain_names": body.get("plain_names", False),
            "timeouts": timeouts}


async def add_remote(request: web.Request) -> web.Response:
    """``{"name", "url", "api_key"?, "key_env"?, "allow_insecure"?, "plain_names"?, "timeouts"?}``:
    the key goes to the OS keyring (refused, with what to do instead, where there is none); 201
    with the upstream after a first reading of its models (its error, if it could not be read:
    Hearth's words and a status, never what the address answered)."""
    from runtime.server.validation import read_json

    _add_consented(request, None)
    f = _fields(await read_json(request))
    if f["key_env"] is not None:
        _add_consented(request, f["key_env"])
    try:
        upstream = await asyncio.to_thread(  # resolving the host name blocks
            make_upstream, f["name"], f["url"], key=f"env:{f['key_env']}" if f["key_env"] else None,
            allow_insecure=f["allow_insecure"], timeouts=f["timeouts"], plain_names=f["plain_names"])
    except UpstreamRefused as e:
        raise bad_request(str(e), e.field) from None
    remotes = request.app[REMOTES]
    if f["api_key"]:  # the keyring may block (D-Bus, Keychain): in a thread; the list changes on the loop
        try:
            await asyncio.to_thread(store_key, upstream.name, f["api_key"])
        except KeyringUnavailable as e:
            raise ApiError(400, str(e), param="api_key", code="no_keyring") from None
        upstream.key = "keyring"
    try:
        remotes.add(upstream)
    except UpstreamRefused as e:
        raise bad_request(str(e), e.field) from None
    errors = await remotes.refresh(upstream.name)
    status = next(s for s in remotes.status() if s["name"] == upstream.name)
    return web.json_response({**status, "error": errors.get(upstream.name)}, status=201)


async def remove_remote(request: web.Request) -> web.Response:
    name = request.match_info.get("name") or request.query.get("name")
    if not name:
        raise bad_request("name the upstream to remove: DELETE /hearth/remotes/NAME", "name")
    _add_consented(request, None)
    remotes = request.app[REMOTES]
    up = remotes.get(name)
    if up is None or not remotes.remove(name, keep_key=True):
        raise ApiError(404, f"no upstream named {name[:64]!r}", param="name", code="upstream_not_found")
    if up.key == "keyring":
        await asyncio.to_thread(delete_key, name)
    return web.json_response({"removed": name})


async def refresh_remote(request: web.Request) -> web.Response:
    """Read the upstream's models again now; 200 with its state (and the error, if any)."""
    name = request.match_info["name"]
    remotes = request.app[REMOTES]
    if remotes.get(name) is None:
        raise ApiError(404, f"no upstream named {name[:64]!r}", param="name", code="upstream_not_found")
    errors = await remotes.refresh(name)
    status = next(s for s in remotes.status() if s["name"] == name)
    return web.json_response({**status, "error": errors.get(name)})


ROUTES = [
    ("GET", "/hearth/remotes", list_remotes),
    ("POST", "/hearth/remotes", add_remote),
    ("DELETE", "/hearth/remotes", remove_remote),
    ("DELETE", "/hearth/remotes/{name}", remove_remote),
    ("POST", "/hearth/remotes/{name}/refresh", refresh_remote),
]
