"""The model store over HTTP: local models, the catalog with fit verdicts, downloads, search.

The download manager lives in the service process (``DOWNLOADS`` app key); it is started
with the app and resumes the downloads a previous run left unfinished.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from runtime.server import sse
from runtime.server.app_keys import CONFIG, MANAGER
from runtime.server.errors import ApiError, bad_request
from runtime.server.models.local_models import delete_local, local_models
from runtime.import_confirm import ensure_token
from runtime.server.security import require_user_act
from runtime.store import checkpoint_pull, hub
from runtime.store.catalog import CatalogEntry, load_catalog
from runtime.store.downloads import DownloadManager, DownloadNotFound, NotEnoughSpace
from runtime.store.gguf_file import InvalidModelFile
from runtime.store.pull_target import NothingToPull
from runtime.store.refs import BadReference
from runtime.store.registry import ModelNotFound, Registry
from runtime.store.resolve import UnknownModel, resolve_model

DOWNLOADS = web.AppKey("downloads", DownloadManager)
HEARTBEAT_S = 15.0
#: seconds an event stream stays open; then it ends with a ``retry:`` hint and its client
#: opens another (an EventSource does so by itself): no stream holds a connection for good
STREAM_LIFETIME_S = 600.0


async def store_ctx(app: web.Application) -> AsyncIterator[None]:
    await asyncio.to_thread(ensure_token, app[CONFIG].data_dir)
    manager = DownloadManager(app[CONFIG].data_dir / "downloads.json")
    app[DOWNLOADS] = manager
    await manager.start()
    yield
    await manager.close()


def _registry(request: web.Request) -> Registry:
    return Registry(request.app[CONFIG].data_dir)


def store_error(e: Exception) -> ApiError:
    """The API error for a store exception (status and code by kind)."""
    if isinstance(e, (BadReference, NothingToPull)):
        return ApiError(400, str(e), param="model", code="invalid_model_reference")
    if isinstance(e, (UnknownModel, hub.RepoNotFound, ModelNotFound)):
        return ApiError(404, str(e), param="model", code="model_not_found")
    if isinstance(e, hub.NoGGUF):
        return ApiError(422, str(e), param="model", code="no_gguf_files")
    if isinstance(e, NotEnoughSpace):
        return ApiError(507, str(e), code="insufficient_storage")
    if isinstance(e, InvalidModelFile):
        return ApiError(400, str(e), param="path", code="invalid_model")
    if isinstance(e, DownloadNotFound):
        return ApiError(404, str(e), code="download_not_found")
    if isinstance(e, hub.HubError):
        return ApiError(502, str(e), type="server_error", code="hub_error")
    raise e


async def _body(request: web.Request, key: str) -> str:
    from runtime.server.validation import read_json

    body = await read_json(request)
    value = body.get(key) if isinstance(body, dict) else None
    if not isinstance(value, str) or not value.strip():
        raise bad_request(f"'{key}' is required: a string", key)
    return value.strip()


# --- local models -------------------------------------------------------------------------
async def list_local(request: web.Request) -> web.Response:
    """The one listing of local models (``local_models``), with the disk they use."""
    models = await local_models(request.app)
    disk = await asyncio.to_thread(_registry(request).disk_usage)
    return web.json_response({"models": [m.to_dict() for m in models], "disk": disk})


async def delete_model(request: web.Request) -> web.Response:
    """Delete a model under the service's one policy (``local_models.delete_local``)."""
    return web.json_response(await delete_local(request.app, request.match_info["id"]))


async def import_model(request: web.Request) -> web.Response:
    # importing makes a file usable by every later request: the user's own act
    require_user_act(request, "importing a file", "import it in the app or run `hearth import PATH`",
                     "import_not_confirmed")
    path = await _body(request, "path")
    try:
        model = await asyncio.to_thread(_registry(request).import_file, path)
    except InvalidModelFile as e:
        raise store_error(e) from None
    finally:
        request.app[MANAGER].forget_resolved()
    return web.json_response(model.to_dict(), status=201)


# --- catalog ------------------------------------------------------------------------------
def _shape(entry: CatalogEntry, data_dir: Path):
    from runtime.hardware.model_shape import catalog_shape, shape_of_file

    try:
        return shape_of_file(resolve_model(entry.id, data_dir).path), True
    except (UnknownModel, InvalidModelFile, LookupError):
        return catalog_shape(entry), False


def _fit(entry: CatalogEntry, hw, config) -> tuple[dict | None, bool]:
    from runtime.hardware.fit import plan_fit

    if "task" in entry.raw:  # an embedding or reranking model
        from runtime.server.models.embed_engines import encoder_fit

        return encoder_fit(entry, hw, config.data_dir)
    try:
        shape, local = _shape(entry, config.data_dir)
        if shape is None or hw is None:
            return None, local
        e = config.engine
        plan = plan_fit(shape, hw, ctx=min(e.ctx, shape.ctx_train or e.ctx) if e.ctx else None,
                        kv_type=e.kv_type, n_seq=e.parallel, n_batch=e.n_batch)
    except (ValueError, ArithmeticError) as e:
        return {"verdict": None, "fits": None, "message": str(e)}, False
    return {"verdict": plan.verdict, "fits": plan.fits, "ctx": plan.ctx, "gpu_layers": plan.gpu_layers,
            "total_bytes": plan.total_bytes, "predicted_tokens_per_s": (
                round(plan.predicted_tokens_per_s, 1) if plan.predicted_tokens_per_s else None),
            "message": plan.message, "estimated": shape.source == "catalog"}, local


async def catalog(request: web.Request) -> web.Response:
    config = request.app[CONFIG]
    try:
        hw = await request.app[MANAGER].hardware()
    except (RuntimeError, OSError):
        hw = None

    def build() -> list[dict]:
        out = []
        for e in load_catalog().values():
            fit, local = _fit(e, hw, config)
            out.append({**e.to_dict(), "local": local, "fit": fit})
        return out

    return web.json_response({"models": await asyncio.to_thread(build)})


# --- downloads ----------------------------------------------------------------------------
async def pull(request: web.Request) -> web.Response:
    ref = await _body(request, "model")
    try:
        d = await request.app[DOWNLOADS].pull(ref)
    except (BadReference, NothingToPull, hub.HubError, NotEnoughSpace) as e:
        raise store_error(e) from None
    return web.json_response({"id": d.id, "download": d.to_dict()}, status=202)


async def list_downloads(request: web.Request) -> web.Response:
    return web.json_response({"downloads": [d.to_dict() for d in request.app[DOWNLOADS].list()]})


async def download_action(request: web.Request) -> web.Response:
    manager = request.app[DOWNLOADS]
    action = request.match_info["action"]
    op = {"pause": manager.pause, "resume": manager.resume, "cancel": manager.cancel}.get(action)
    if op is None:
        raise ApiError(404, f"unknown action {action!r}: pause, resume or cancel", code="not_found")
    try:
        return web.json_response(op(request.match_info["id"]).to_dict())
    except DownloadNotFound as e:
        raise store_error(e) from None


def _env_seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if 0.05 <= value <= 86400 else default


def heartbeat_s() -> float:
    """Seconds between ``: ping`` comments on an idle event stream (``HEARTH_SSE_HEARTBEAT_S``)."""
    return min(_env_seconds("HEARTH_SSE_HEARTBEAT_S", HEARTBEAT_S), 3600.0)


def stream_lifetime_s() -> float:
    """Seconds an event stream stays open (``HEARTH_SSE_LIFETIME_S``)."""
    return _env_seconds("HEARTH_SSE_LIFETIME_S", STREAM_LIFETIME_S)


async def download_events(request: web.Request) -> web.StreamResponse:
    """SSE: each download's state first, then every change; ``: ping`` comments keep it open
    until its lifetime (``stream_lifetime_s``) ends it with ``retry:``, and its client reconnects
    (and is sent every download's state again).

    The wait for the next event is one task that outlives each heartbeat: cancelling it on
    a timeout (``asyncio.wait_for``) would close the subscription and end the stream."""
    response = await sse.open_stream(request)
    events = request.app[DOWNLOADS].events()
    pending: asyncio.Future | None = None
    beat = heartbeat_s()
    loop = asyncio.get_running_loop()
    ends_at = loop.time() + stream_lifetime_s()
    try:
        while True:
            left = ends_at - loop.time()
            if left <= 0:
                await response.write(b"retry: 1000\n\n")
                break
            if pending is None:
                pending = asyncio.ensure_future(anext(events))
            done, _ = await asyncio.wait({pending}, timeout=min(beat, left))
            if not done:
                if loop.time() < ends_at:
                    await response.write(b": ping\n\n")
                continue
            finished, pending = pending, None
            try:
                item = finished.result()
            except StopAsyncIteration:
                break
            await response.write(sse.frame(item))
    except ConnectionResetError:
        pass
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                await pending
        with contextlib.suppress(Exception):
            await events.aclose()
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
    return response


# --- search -------------------------------------------------------------------------------
async def search(request: web.Request) -> web.Response:
    q = request.query.get("q", "").strip()
    limit = request.query.get("limit", "20")
    if not (limit.isascii() and limit.isdigit()) or not 1 <= int(limit) <= 100:  # ("³".isdigit() is True)
        raise bad_request("'limit' must be an integer from 1 to 100", "limit")
    try:
        hits = await asyncio.to_thread(hub.search, q, int(limit))
    except hub.HubError as e:
        raise store_error(e) from None
    return web.json_response({"query": q, "models": hits})


async def repo_files(request: web.Request) -> web.Response:
    repo = request.query.get("repo", "").strip()
    if not repo:
        raise bad_request("'repo' is required: owner/name", "repo")
    try:
        remote = await asyncio.to_thread(hub.repo_info, repo)
        files = await asyncio.to_thread(checkpoint_pull.file_summary, remote)
    except hub.HubError as e:
        raise store_error(e) from None
    return web.json_response({"repo": remote.repo_id, "commit": remote.commit, "files": files})


#: a model card is read up to this many bytes; a longer one is cut there (``truncated``)
CARD_MAX_BYTES = 256 * 1024
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


def _fetch_card(repo: str) -> tuple[str, bool] | None:
    """A repository's README.md on the hub, at most ``CARD_MAX_BYTES`` of it, through the hub
    client's session and its download timeout; None when the repository or its card is missing.
    Blocking: call it from a thread."""
    import httpx2
    from huggingface_hub import constants, hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session

    from runtime.store.hf_cache import hub_endpoint

    url = hf_hub_url(repo, "README.md", endpoint=hub_endpoint())
    timeout = httpx2.Timeout(constants.HF_HUB_DOWNLOAD_TIMEOUT)
    try:
        with get_session().stream("GET", url, headers=build_hf_headers(), timeout=timeout,
                                  follow_redirects=True) as r:
            if r.status_code in (401, 404):  # missing (a private repository answers 401 without a token)
                return None
            if r.status_code != 200:
                raise hub.HubError(f"the hub answered {r.status_code} for the card of {repo}")
            body = bytearray()
            for chunk in r.iter_bytes():
                body += chunk
                if len(body) > CARD_MAX_BYTES:
                    break
    except (httpx2.TransportError, OSError) as e:
        raise hub.HubUnreachable(f"cannot reach the hub at {hub_endpoint()}: {e}") from None
    truncated = len(body) > CARD_MAX_BYTES
    text = bytes(body[:CARD_MAX_BYTES]).decode("utf-8", errors="ignore" if truncated else "replace")
    return text, truncated


async def model_card(request: web.Request) -> web.Response:
    """A hub repository's model card (its README.md as Markdown text), size-capped."""
    repo = request.query.get("repo", "").strip()
    if not _REPO_ID.match(repo) or ".." in repo or "--" in repo:
        raise bad_request("'repo' must be a hub repository id: owner/name", "repo")
    try:
        card = await asyncio.to_thread(_fetch_card, repo)
    except hub.HubError as e:
        raise store_error(e) from None
    if card is None:
        raise ApiError(404, f"{repo} has no model card on the hub (or no such repository)", param="repo",
                       code="model_card_not_found")
    text, truncated = card
    return web.json_response({"repo": repo, "card": text, "truncated": truncated})


ROUTES = [
    ("GET", "/hearth/models", list_local),
    ("POST", "/hearth/models/pull", pull),
    ("POST", "/hearth/models/import", import_model),
    ("DELETE", "/hearth/models/{id:.+}", delete_model),
    ("GET", "/hearth/catalog", catalog),
    ("GET", "/hearth/downloads", list_downloads),
    ("GET", "/hearth/downloads/events", download_events),
    ("POST", "/hearth/downloads/{id}/{action}", download_action),
    ("GET", "/hearth/search", search),
    ("GET", "/hearth/search/files", repo_files),
    ("GET", "/hearth/search/card", model_card),
]
