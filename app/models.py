"""The model manager's service: catalog, local models, downloads with live progress, the running model.

Everything goes through the service's store routes; download progress arrives as server-sent
events and updates ``DownloadListModel`` rows in place.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

from PySide6.QtCore import QObject, Signal

from app import background, hub_problems
from app.api_client import ApiClient
from app.api_types import AvailableModel, CatalogModel, LocalModel, RunningModel, available_models
from app.errors import ApiProblem, ServiceUnreachable, UserError, explain
from app.hub_problems import HUB_WAIT_S
from app.qt_models import CatalogListModel, DownloadListModel, LocalModelListModel

log = logging.getLogger("hearth.app")
FINAL_STATES = ("completed", "failed", "cancelled")
ACTIVE_STATES = ("queued", "downloading", "waiting", "verifying", "converting")


def _not_loaded(row: AvailableModel) -> AvailableModel:
    """A ``/v1/models`` row of a model the app no longer knows to be loaded."""
    out = AvailableModel(**row)
    out.pop("memory", None)
    out["loaded"] = False
    return out


def _rows(body, *keys: str) -> list[dict]:
    if isinstance(body, list):
        return [r for r in body if isinstance(r, dict)]
    for k in keys:
        if isinstance(body.get(k), list):
            return [r for r in body[k] if isinstance(r, dict)]
    return []


#: the fit badge's colour by the planner's verdict: green fits, amber partly, blue CPU, red too big
VERDICT_COLOURS = {"gpu": "#2e7d32", "partial": "#b26a00", "cpu": "#1565c0", "too_big": "#c62828"}
CAPABILITY_WORDS = {"tools": "tools", "vision": "vision", "audio": "audio", "reasoning": "reasoning",
                    "embedding": "embedding", "rerank": "rerank"}


def capability_badges(caps: list[str] | None) -> list[str]:
    """The capabilities worth a badge (every chat model chats and completes)."""
    return [CAPABILITY_WORDS[c] for c in caps or () if c in CAPABILITY_WORDS]


def is_chat_model(caps: list[str] | None) -> bool:
    """Whether a chat can use the model: unknown capabilities are given the benefit of the doubt;
    an embedding or rerank model (no chat template) and anything that cannot generate is not."""
    if caps is None:
        return True
    if "chat" in caps:
        return True
    return "completion" in caps and not {"embedding", "rerank"} & set(caps)


def fit_badge(fit: dict | None) -> tuple[str, str]:
    """(text, colour) of the fit badge from a fit plan: where the model runs and how fast."""
    if not fit or not fit.get("verdict"):
        return "", ""
    verdict = fit["verdict"]
    words = {"gpu": "Fits on GPU", "partial": "Partly on GPU", "cpu": "Runs on CPU", "too_big": "Too big"}
    colour = VERDICT_COLOURS
    text = words.get(verdict, verdict)
    speed = fit.get("predicted_tokens_per_s")
    if speed and verdict != "too_big":
        text += f" · ~{speed:.0f} tok/s" if speed >= 1 else " · <1 tok/s"
    return text, colour.get(verdict, "#616161")


class ModelStoreService(QObject):
    error = Signal(object)  # UserError
    local_changed = Signal(list)  # ids of the models the chat can use
    running_changed = Signal(object)  # the running model (a RunningModel), None when none
    residents_changed = Signal(list)  # every resident model (the service's description of each)
    available_changed = Signal(list)  # /v1/models rows: id, loaded, capabilities, memory, context length
    loading = Signal(str, bool)  # a model id, and whether a load of it is under way (seconds for a big one)

    def __init__(self, client: ApiClient, data_dir: Path | None = None) -> None:
        super().__init__()
        self.client = client
        self.data_dir = data_dir  # where the service keeps the import token (see import_file)
        self.catalog = CatalogListModel()
        self.local = LocalModelListModel()
        self.downloads = DownloadListModel()
        self.running: RunningModel | None = None
        self.residents: list[dict] = []
        self.available: list[AvailableModel] = []
        self.store_available: bool | None = None  # None until asked
        self.hub_problem: UserError | None = None  #: why the last question to the hub went unanswered
        self._events: asyncio.Task | None = None
        self._poll: asyncio.Task | None = None
        self._fits: dict[str, dict] = {}

    async def refresh_local(self) -> list[str]:
        """Local models (the store's list, or /v1/models where the service has no store)."""
        try:
            rows = [LocalModel.from_api(m) for m in _rows(await self.client.get("/hearth/models"), "models", "data")]
            self.store_available = True
        except ApiProblem as e:
            if e.status != 404:
                raise
            self.store_available = False
            rows = [LocalModel.from_openai(m) for m in _rows(await self.client.get("/v1/models"), "data")
                    if not m.get("remote")]  # models other machines serve are not installed here
        for r in rows:
            if r.fit is None:
                r.fit = self._fits.get(r.id)
        self.local.reset(rows)
        ids = [r.id for r in rows]
        self.local_changed.emit(ids)
        return ids

    async def attach_fits(self) -> None:
        """Ask the planner about each local model that has no fit yet, and show its badge."""
        for row in self.local.items():
            if not row.fit:
                fit = await self.fit(row.id)
                if fit is not None:
                    self.local.upsert(replace(row, fit=fit))

    async def refresh_catalog(self) -> None:
        if self.store_available is False:
            return
        try:
            rows = [CatalogModel.from_api(e) for e in
                    _rows(await self.client.get("/hearth/catalog", timeout=30), "models", "data", "entries")]
        except ApiProblem as e:
            if e.status == 404:
                self.store_available = False
                return
            raise
        for r in rows:
            if r.fit is None:
                r.fit = self._fits.get(r.id)
        self.catalog.set_entries(rows)

    async def fit(self, model_id: str) -> dict | None:
        """The planner's verdict for a local model (cached per model)."""
        if model_id not in self._fits:
            try:
                self._fits[model_id] = await self.client.get(f"/hearth/fit?model={quote(model_id, safe='')}", timeout=60)
            except ApiProblem:
                return None
        return self._fits[model_id]

    async def refresh_downloads(self) -> None:
        if self.store_available is False:
            return
        try:
            self.downloads.reset(_rows(await self.client.get("/hearth/downloads"), "downloads", "data"))
        except ApiProblem as e:
            if e.status != 404:
                raise

    async def refresh_running(self) -> RunningModel | None:
        """The loaded model and the memory its worker process holds, as the service measures it."""
        return self.running_from_stats(await self.client.get("/hearth/stats"))

    def running_from_stats(self, stats: dict) -> RunningModel | None:
        models = [dict(m) for m in stats.get("models") or []]
        for m in models:  # the memory its worker holds, as the service measures it
            m["memory_bytes"] = (m.get("memory") or {}).get("rss_bytes")
        self.running = RunningModel.from_api(models[0]) if models else None
        if [_key(m) for m in models] != [_key(m) for m in self.residents]:
            self.residents = models
            self.residents_changed.emit(models)
        self.running_changed.emit(self.running)
        return self.running

    async def refresh_available(self) -> list[AvailableModel]:
        """The models a chat can pick, with whether each is loaded, its memory and capabilities."""
        rows = available_models(_rows(await self.client.get("/v1/models"), "data"))
        self.available = rows
        caps = {r["id"]: r.get("capabilities") for r in rows}
        for row in self.local.items():
            found = caps.get(row.id)
            if isinstance(found, list) and row.capabilities != found:
                self.local.upsert(replace(row, capabilities=list(found)))
        self.available_changed.emit(rows)
        return rows

    def forget_loaded(self) -> None:
        """The service stopped answering: no model is loaded as far as anyone can tell (the
        picker's "loaded" marks and memory go; what each model can do stays)."""
        self.running_from_stats({})
        if any(r.get("loaded") for r in self.available):
            self.available = [_not_loaded(r) for r in self.available]
            self.available_changed.emit(self.available)

    async def load(self, model_id: str, *, pin: bool | None = None, ctx: int | None = None) -> bool:
        """Load a model now (the chat's picker does this on demand), or change its pin."""
        body = {k: v for k, v in (("pin", pin), ("ctx", ctx)) if v is not None}
        self.loading.emit(model_id, True)
        try:
            await self.client.post(f"/hearth/models/{quote(model_id, safe='')}/load", body, timeout=600)
        except ApiProblem as e:
            self.error.emit(explain(e))
            return False
        finally:
            self.loading.emit(model_id, False)
        await asyncio.gather(self.refresh_running(), self.refresh_available())
        return True

    async def unload_model(self, model_id: str) -> bool:
        try:
            await self.client.post(f"/hearth/models/{quote(model_id, safe='')}/unload")
        except ApiProblem as e:
            self.error.emit(explain(e))
            return False
        await asyncio.gather(self.refresh_running(), self.refresh_available())
        return True

    async def fit_at(self, model_id: str, ctx: int | None) -> dict | None:
        """The planner's verdict for a model at a context length (not cached: the chat asks as
        the user changes it)."""
        q = f"/hearth/fit?model={quote(model_id, safe='')}" + (f"&ctx={ctx}" if ctx else "")
        try:
            return await self.client.get(q, timeout=60)
        except ApiProblem:
            return None

    async def refresh(self) -> None:
        await self.refresh_local()
        await asyncio.gather(self.refresh_catalog(), self.refresh_downloads(), self.refresh_running(),
                             self.refresh_available())
        self.follow_downloads()
        await self.attach_fits()

    # Hugging Face, through the service (it reaches the hub; the app reaches only the service)
    async def _ask_hub(self, path: str, title: str, again: str, missing_ok: bool = False) -> dict | None:
        """The service's answer from the hub; None (the problem shown in words) when it could
        not ask it or the hub did not answer within ``HUB_WAIT_S``. ``missing_ok``: a 404 is
        an answer (an empty dict), not a problem."""
        try:
            async with asyncio.timeout(HUB_WAIT_S):
                return await self.client.get(path, timeout=None)
        except TimeoutError:
            problem = hub_problems.too_slow(title, again)
        except ApiProblem as e:
            if missing_ok and e.status == 404:
                return {}
            problem = hub_problems.hub_problem(title, e, again)
        self.hub_problem = problem
        self.error.emit(problem)
        return None

    async def search_hub(self, query: str, limit: int = 30) -> list[dict] | None:
        """GGUF repositories on the hub that match ``query``, most downloaded first; None (the
        problem shown) when the service could not ask the hub."""
        body = await self._ask_hub(f"/hearth/search?q={quote(query.strip())}&limit={limit}",
                                   "Hugging Face could not be searched.", "Search again")
        if body is None:
            return None
        return [m for m in body.get("models") or [] if isinstance(m, dict) and isinstance(m.get("repo"), str)]

    async def hub_files(self, repo: str) -> dict | None:
        """A repository's model files (``file``, ``quant``, ``size``, ``parts``) and its commit."""
        return await self._ask_hub(f"/hearth/search/files?repo={quote(repo, safe='/')}",
                                   f"The files of {repo} could not be listed.", "Pick the model again")

    async def hub_card(self, repo: str) -> str | None:
        """A repository's model card (Markdown); "" when it has none, None (the problem shown)
        when the service could not ask the hub."""
        body = await self._ask_hub(f"/hearth/search/card?repo={quote(repo, safe='/')}",
                                   f"The card of {repo} could not be read.", "Pick the model again", missing_ok=True)
        if body is None:
            return None
        card = body.get("card")
        return card if isinstance(card, str) else ""

    # actions
    async def pull(self, ref: str) -> str | None:
        ref = ref.strip()
        if not ref:
            return None
        try:
            body = await self.client.post("/hearth/models/pull", {"model": ref})
        except ServiceUnreachable as e:
            self.error.emit(explain(e))
            return None
        except ApiProblem as e:
            from_catalog = any(entry.id == ref for entry in self.catalog.items())
            self.error.emit(hub_problems.pull_problem(e, from_catalog))
            return None
        if isinstance(body.get("download"), dict):
            self.downloads.upsert(body["download"])
        elif body.get("id"):
            self.downloads.upsert({"id": body["id"], "model": ref, "state": "queued"})
        self.follow_downloads()
        return body.get("id")

    async def act(self, download_id: str, action: str) -> None:
        """``pause``, ``resume`` or ``cancel`` a download."""
        try:
            body = await self.client.post(f"/hearth/downloads/{quote(download_id, safe='')}/{action}")
            if isinstance(body, dict) and body.get("id"):
                await self._update(body)
            self.follow_downloads()
        except ApiProblem as e:
            self.error.emit(explain(e))

    async def delete(self, model_id: str) -> bool:
        try:
            await self.client.delete(f"/hearth/models/{quote(model_id, safe='')}")
        except ApiProblem as e:
            self.error.emit(explain(e))
            return False
        await self.refresh_local()
        return True

    async def import_file(self, path: str) -> bool:
        """Import the file the user chose in the file dialog: that choice is the confirmation
        the service asks for (the data directory's import token in a header)."""
        from runtime.import_confirm import CONFIRM_HEADER, load_token

        same = self.installed_as(path)
        if same is not None:
            self.error.emit(UserError("This model is already installed.",
                                      f"{Path(path).name} is {same.name} ({same.id}) on the Models page.",
                                      "Nothing was added.", "already_installed"))
            return False
        token = load_token(self.data_dir) if self.data_dir is not None else None
        try:
            await self.client.post("/hearth/models/import", {"path": path}, timeout=300,
                                   headers={CONFIRM_HEADER: token} if token else None)
        except ApiProblem as e:
            self.error.emit(import_problem(e))
            return False
        await self.refresh_local()
        return True

    def installed_as(self, path: str) -> LocalModel | None:
        """The installed model that is this file: the same file, or a copy of it (same name and
        size), whatever brought it here (a download, the embedded set, an import)."""
        p = Path(path)
        try:
            real, size = p.resolve(), p.stat().st_size
        except OSError:
            return None
        for m in self.local.items():
            if not m.path:
                continue
            other = Path(m.path)
            if other.resolve() == real or (other.name == p.name and m.size == size):
                return m
        return None

    async def unload(self) -> bool:
        """Unload every resident model."""
        ids = [m.get("id") for m in self.residents] or ([self.running.id] if self.running is not None else [])
        try:
            for mid in ids:
                if mid:
                    await self.client.post(f"/hearth/models/{quote(mid, safe='')}/unload")
        except ApiProblem as e:
            self.error.emit(explain(e))
            return False
        await self.refresh_running()
        return True

    # live progress
    def follow_downloads(self) -> None:
        if self.store_available and (self._events is None or self._events.done()):
            self._events = background.start(self._follow(), "following the downloads")
        if self.store_available and (self._poll is None or self._poll.done()):
            self._poll = background.start(self._poll_active(), "reading the downloads")

    async def _poll_active(self, every_s: float = 1.0) -> None:
        """While a download runs, read the list once a second too: the event stream is rate-limited
        and may hold back the last progress of a transfer that stalls."""
        while any(d.get("state") in ACTIVE_STATES for d in self.downloads.items()):
            await asyncio.sleep(every_s)
            try:
                rows = _rows(await self.client.get("/hearth/downloads"), "downloads", "data")
                for d in rows:
                    await self._update(d)  # a finished one refreshes the local models: that may fail too
            except ApiProblem:
                return

    async def _update(self, d: dict) -> None:
        before = self.downloads.row_of(d["id"])
        old = self.downloads.item(before) if before is not None else None
        if old == d:
            return
        self.downloads.upsert(d)
        if d.get("state") != (old or {}).get("state") and d.get("state") in FINAL_STATES:
            await self._finished(d)

    async def _follow(self, reconnect_s: float = 1.0) -> None:
        """Follow the download events; the service ends each stream after a while (its
        lifetime), and then it is opened again, sending every download's state anew."""
        while True:
            try:
                async for d in self.client.events("GET", "/hearth/downloads/events"):
                    if d.get("id"):
                        await self._update(d)
            except ServiceUnreachable:
                return
            except ApiProblem as e:
                log.warning("download events stopped: %s", e)
                return
            await asyncio.sleep(reconnect_s)

    async def _finished(self, d: dict) -> None:
        if d["state"] == "completed":
            await self.refresh_local()
        elif d["state"] == "failed":
            self.error.emit(hub_problems.download_failed(str(d.get("model") or d.get("ref")), str(d.get("error"))))

    def close(self) -> None:
        for task in (self._events, self._poll):
            if task is not None:
                task.cancel()


#: the service's advice for a damaged file it downloaded; an imported file is the user's to replace
_DOWNLOAD_AGAIN = re.compile(r"[;:,]\s*download it again\.?\s*$", re.IGNORECASE)


def import_problem(e: ApiProblem) -> UserError:
    """A file the user chose that the service refused: what is wrong with it, and what the user
    can do (import it again once it is whole, or choose another), never "download it again"."""
    if isinstance(e, ServiceUnreachable):
        return explain(e)
    detail = _DOWNLOAD_AGAIN.sub("", e.message).rstrip()
    if e.code == "invalid_model":
        return UserError("This file is not a model Hearth can run.", detail,
                         "If it was still being copied or downloaded, import it again once it is complete; "
                         "otherwise choose another .gguf file.", e.code)
    return UserError("The file could not be imported.", detail, "Try again, or choose another .gguf file.",
                     e.code or "")


def _key(m: dict) -> tuple:
    return (m.get("id"), m.get("ctx"), m.get("pinned"), m.get("pid"), (m.get("memory_bytes") or 0) >> 20)
