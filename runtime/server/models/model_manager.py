"""The service's models: resolving names, planning their fit, starting engine workers.

Which models are resident (several at once, within the memory budget) is the router's
business (``runtime.server.models.router``); this module gives it the two things it needs, a fit
plan for a model and a started engine, and keeps the service-wide state (/health's error,
the request counter)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.chat.template_check import TemplateRefused
from runtime.config import DEFAULT_CTX, ServeConfig
from runtime.engine import spare
from runtime.engine.client import EngineClient
from runtime.engine.messages import WorkerSpec
from runtime.engine.protocol import Engine, ErrorCode, ModelLoadFailed
from runtime.engine.worker_pipe import WorkerProcess
from runtime.server.models.embed_engines import GENERATE, EmbedPlan, model_task, refuse_unless, start_embed_engine
from runtime.server.models.model_refs import resolve_request_model
from runtime.server.models.residency import Budget, default_budget
from runtime.server.models.router import ModelDoesNotFit, NoRoom, Router  # noqa: F401  (errors re-exported)
from runtime.store.model_settings import LoadSettings, stored_settings
from runtime.store.model_templates import stored_template
from runtime.store.projector import projector_for
from runtime.store.resolve import InvalidModelFile, ModelPathRefused, ResolvedModel, UnknownModel  # noqa: F401

if TYPE_CHECKING:
    from runtime.hardware.info import HardwareInfo
    from runtime.remote.registry import Remotes
    from runtime.store.registry import LocalModel


log = logging.getLogger("hearth.models")


class DraftRefused(ModelLoadFailed):
    """The draft model cannot serve this model (another vocabulary, a missing file)."""


class ModelLoadTimeout(ModelLoadFailed):
    """The worker did not finish loading the model within ``load_timeout``; it was killed."""


class ModelManager:
    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.last_error: str | None = None
        self.requests_served = 0
        self._resolved: dict[str, ResolvedModel] = {}
        self._tasks: dict[str, str] = {}  # model file -> the task it serves
        self._hardware: HardwareInfo | None = None
        #: each model's stored load settings (``runtime.store.model_settings``), read once
        self._load_settings: dict[str, LoadSettings] = {}
        self._hardware_lock = asyncio.Lock()
        self._budget: Budget | None = None
        #: the hardware probe started with the service (``hearth serve``), a concurrent future
        self.early_hardware = None
        #: remote engines (``runtime.remote.registry.Remotes``), set when the app is built
        self.remotes: Remotes | None = None  #: the remote engines' registry, once the routes install it
        self.router = Router(self.plan, self._load, self.budget, config.engine.ctx, config.residency.keep_alive,
                             config.residency.load_wait, unplanned_ctx=DEFAULT_CTX)

    @property
    def engine(self) -> Engine | None:
        """The most recently used resident engine (None when no model is loaded)."""
        r = self.router.latest()
        return r.engine if r is not None else None

    async def budget(self) -> Budget:
        """The residency budget: the planner's safe amount with nothing loaded (probed once),
        within ``--memory-budget``; without a hardware probe, only ``--max-models`` bounds it."""
        if self._budget is None:
            c = self.config.residency
            try:
                hw = await self.hardware()
                # the probe runs before the first load: available memory is the empty machine's
                self._budget = default_budget(hw, c.max_models, c.memory_budget)
            except (RuntimeError, OSError, ValueError) as e:
                log.warning("no hardware probe, so no memory budget: %s", e)
                self._budget = Budget(None, {}, c.max_models, "none")
        return self._budget

    async def hardware(self, for_load: bool = False):
        """This machine (probed once, in a child process); available RAM is read fresh. With
        ``for_load`` (a model's load comes next) the probe runs in the spare engine worker,
        which that load then takes: one llama.cpp import for both."""
        import psutil

        async with self._hardware_lock:
            early, self.early_hardware = self.early_hardware, None
            if self._hardware is None and early is not None:
                try:
                    self._hardware = await asyncio.wrap_future(early)
                except (RuntimeError, OSError, ValueError) as e:  # probed again below
                    log.warning("the hardware probe at start failed: %s", e)
            if self._hardware is None:
                self._hardware = await asyncio.get_running_loop().run_in_executor(None, _probe, for_load)
        self._hardware.ram.available = int(psutil.virtual_memory().available)
        return self._hardware

    async def plan(self, model: ResolvedModel | LocalModel, ctx: int | None = None):
        """The fit plan for loading ``model`` at ``ctx`` (default ``--ctx``, else the planner's
        default context) with this service's
        settings, as on this machine with no model loaded (the resident models' planned RAM
        counts as available: whether it fits beside them is the router's budget check). None
        if the probe fails: loading then goes ahead with the settings as given."""
        from runtime.hardware.fit import plan_fit
        from runtime.hardware.model_shape import shape_of_file

        c = self.config.engine
        if await self.task_of(model) != GENERATE:  # an encoder: the embedding worker
            return EmbedPlan.for_file(model.path)
        kv_type = (await self.load_settings(model)).kv_type or c.kv_type

        def blocking(hw):  # headers are read in a thread: the event loop keeps answering
            try:
                draft_path, _ = self.draft_for(model)
            except DraftRefused:
                draft_path = None  # the load reports it
            draft = shape_of_file(draft_path) if draft_path and draft_path != "ngram" else None
            return plan_fit(shape_of_file(model.path), hw, ctx=ctx or c.ctx, kv_type=kv_type,
                            n_seq=c.parallel, n_batch=c.n_batch, draft=draft)

        try:
            hw = await self.hardware(for_load=True)
            hw.ram.available += self.router.used().ram
            if c.rpc:  # the workers as they are now: one that went away is planned without
                hw = await self.with_rpc(hw)
            return await asyncio.to_thread(blocking, hw)
        except InvalidModelFile:
            raise  # a damaged or hostile file is refused; it must not unload the running model
        except (RuntimeError, OSError, ValueError) as e:
            log.warning("no fit plan for %s: %s", model.id, e)
            return None

    async def with_rpc(self, hw):
        """``hw`` with the ``--rpc`` workers that answer now as devices (asked in a child process,
        which registers them and ends, leaving each worker free for the model's own worker)."""
        from runtime.hardware.probe import in_subprocess, remote_gpus

        from runtime.hardware.rpc_workers import remember

        remote, states = await asyncio.to_thread(in_subprocess, remote_gpus, (self.config.engine.rpc,))
        remember(states)  # /health's answer for the workers no model uses: as fresh as this
        for s in states:
            if s.state != "ready":
                log.warning("RPC worker %s left out: %s (%s)", s.endpoint, s.state, s.detail)
        return replace(hw, gpus=remote + [g for g in hw.gpus if not g.remote], rpc=states)

    def resolve(self, ref: str | None) -> ResolvedModel:
        """Raises ``UnknownModel``, ``InvalidModelFile`` or ``ModelPathRefused`` with a message for the user.
        Blocking (a header is read): async code calls ``resolve_async``."""
        ref = ref or self.config.model
        cached = self._resolved.get(ref)
        if cached is not None and cached.path.is_file():
            return cached
        resolved = resolve_request_model(ref, self.config)
        self._resolved[ref] = resolved
        return resolved

    async def resolve_async(self, ref: str | None) -> ResolvedModel:
        cached = self._resolved.get(ref or self.config.model)
        if cached is not None and cached.path.is_file():  # a stat: no thread hop on every request
            return cached
        return await asyncio.to_thread(self.resolve, ref)

    def forget_resolved(self) -> None:
        """Models were imported or deleted: references are resolved again."""
        self._resolved.clear()
        self._tasks.clear()

    async def task_of(self, model: ResolvedModel | LocalModel) -> str:
        """generate, embedding or rerank (``embed_engines.model_task``), read once per file."""
        key = str(model.path)
        task = self._tasks.get(key)
        if task is None:
            task = self._tasks[key] = await asyncio.to_thread(model_task, model.path)
        return task

    async def engine_for(self, ref: str | None, ctx: int | None = None, keep_alive: float | None = None,
                         pin: bool | None = None, task: str | None = GENERATE) -> Engine:
        """The running engine for ``ref`` (at context ``ctx`` when given): a resident one, or
        one loaded now (see ``runtime.server.models.router``); a dead worker is restarted. A model
        that only an upstream offers (or ``ID@UPSTREAM``) gets its remote engine. ``task``
        (generate, embedding, rerank; None: any): a local model that cannot serve it raises
        ``WrongModelKind`` before anything loads."""
        remote = self.remotes.explicit(ref) if self.remotes is not None else None
        if remote is not None:
            return remote
        try:
            model = await self.resolve_async(ref)
        except (UnknownModel, ModelPathRefused) as missing:  # no local model by that name (an upstream's id may be a path)
            remote = self.remotes.engine_for(ref) if self.remotes is not None else None
            if remote is None:  # an upstream the user did not choose for plain names may list it: say so
                raise (self.remotes.not_chosen(ref, missing) if self.remotes and ref else missing) from None
            return remote
        if task is not None:
            refuse_unless(model.id, await self.task_of(model), task)
        if ctx is None:  # the request's context wins; else the one the user stored for the model
            ctx = (await self.load_settings(model)).ctx
        try:
            return (await self.router.acquire(model, ctx, keep_alive, pin)).engine
        finally:
            if spare.waiting() and self.router.loading is None:  # probed with, and no load took it
                asyncio.get_running_loop().run_in_executor(None, spare.discard)  # not waited for

    async def load_settings(self, model: ResolvedModel | LocalModel) -> LoadSettings:
        """The load settings stored for ``model`` (read once; ``forget_load_settings`` after a
        change). Two first reads at once read the same file: no lock needed."""
        known = self._load_settings.get(model.id)
        if known is None:
            known = self._load_settings[model.id] = await asyncio.to_thread(
                stored_settings, self.config.data_dir, model.id)
        return known

    def forget_load_settings(self, model_id: str) -> None:
        self._load_settings.pop(model_id, None)

    def draft_for(self, model: ResolvedModel | LocalModel, catalog: dict | None = None) -> tuple[str | None, str | None]:
        """(draft file or "ngram", draft id) for ``model``: ``--draft``, else the catalog
        entry's optional ``draft`` (skipped when that model is not downloaded)."""
        ref = self.config.engine.draft
        explicit = ref is not None
        if ref is None:
            if catalog is None:
                from runtime.store.catalog import load_catalog

                catalog = load_catalog()
            entry = catalog.get(model.id)
            ref = entry.raw.get("draft") if entry is not None else None
            if isinstance(ref, dict):
                ref = ref.get("id")
        if not ref or ref == "off":
            return None, None
        if ref == "ngram":
            return "ngram", "ngram"
        try:
            draft = self.resolve(ref)
        except (UnknownModel, InvalidModelFile, ModelPathRefused) as e:
            if explicit:
                raise DraftRefused(f"draft model: {e}") from None
            log.warning("no draft model for %s: %s", model.id, e)
            return None, None
        return str(draft.path), draft.id

    def given_template(self, model: ResolvedModel) -> str | None:
        """``--chat-template-file``'s text where ``model`` is the default model; None otherwise.
        Blocking (the default model is resolved)."""
        if self.config.chat_template is None:
            return None
        try:
            default = self.resolve(None)
        except (UnknownModel, InvalidModelFile, ModelPathRefused):
            return None
        return self.config.chat_template if default.id == model.id else None

    def template_override(self, model: ResolvedModel) -> str | None:
        """The chat template ``model``'s worker renders with instead of its GGUF's:
        ``--chat-template-file`` for the default model, else the one stored for it; None: its
        own. Blocking; ``TemplateRefused`` for a stored file grown too large."""
        given = self.given_template(model)
        return given if given is not None else stored_template(self.config.data_dir, model.id)

    async def _load(self, model: ResolvedModel, plan, ctx: int) -> Engine:
        c = self.config.engine
        if isinstance(plan, EmbedPlan):
            try:
                embedder: Engine = await start_embed_engine(model, c, ctx)
            except Exception as e:
                self.last_error = f"loading {model.id}: {e}"
                raise
            self.last_error = None
            return embedder
        draft, draft_id = await asyncio.to_thread(self.draft_for, model)
        try:
            template = await asyncio.to_thread(self.template_override, model)
        except TemplateRefused as e:
            raise ModelLoadFailed(f"{model.id}'s stored chat template: {e}") from None
        projector = await asyncio.to_thread(projector_for, Path(model.path))
        n_ctx = min(ctx, plan.ctx) if plan is not None else ctx
        stored = await self.load_settings(model)
        kv_type = plan.kv_type if plan is not None else (stored.kv_type or c.kv_type or "f16")
        # the user's layer count wins over the plan's (LM Studio's "GPU offload"); the plan's split
        # of them between GPUs still applies
        gpu_layers = stored.gpu_layers if stored.gpu_layers is not None else plan.gpu_layers if plan is not None else 0
        split = ({"split_mode": plan.split_mode, "tensor_split": plan.tensor_split or None, "main_gpu": plan.main_gpu,
                  "cpu_moe_layers": plan.cpu_moe_layers}
                 if plan is not None and gpu_layers else {})
        rpc = tuple(plan.rpc) if plan is not None else c.rpc  # the workers the plan counted
        engine = EngineClient(WorkerSpec(model.id, str(model.path), replace(c, ctx=n_ctx, kv_type=kv_type, rpc=rpc),
                                         n_gpu_layers=gpu_layers, draft=draft, draft_id=draft_id,
                                         mmproj_path=str(projector.path) if projector is not None else None,
                                         chat_template=template, **split))
        try:
            await asyncio.wait_for(engine.start(), c.load_timeout)
        except asyncio.TimeoutError:
            self.last_error = (f"loading {model.id} took longer than {c.load_timeout:g} s (--load-timeout); "
                               "its worker was stopped")
            await _kill(engine)
            raise ModelLoadTimeout(self.last_error) from None
        except Exception as e:
            self.last_error = str(e)
            if isinstance(e, ModelLoadFailed) and e.code is ErrorCode.DRAFT_REFUSED:
                raise DraftRefused(str(e), e.code) from None
            raise
        self.last_error = None
        return engine

    def status(self) -> dict:
        """/health's ``engine``: the most recently used model's worker, every resident one, and
        ``default_model``, the model a request that names none gets (``--model``)."""
        r = self.router.latest()
        e = r.engine if r is not None else None
        models = [{"id": x.model_id, "state": "running" if x.engine.alive else "crashed", "pid": x.engine.pid,
                   "ctx": x.ctx, "pinned": x.pinned} for x in self.router.residents]
        return {"state": "idle" if e is None else ("running" if e.alive else "crashed"),
                "model": e.model_id if e else None, "pid": e.pid if e else None,
                "error": (e.error if e and not e.alive else None) or self.last_error,
                "loading": self.router.loading[0] if self.router.loading else None, "models": models,
                "default_model": self.default_model_id()}

    def default_model_id(self) -> str:
        """The default model's id where it was resolved (a path given to ``--model`` is named by
        its id then), else ``--model`` as given; nothing is read."""
        resolved = self._resolved.get(self.config.model)
        return resolved.id if resolved is not None else self.config.model

    async def unload(self, model_id: str | None = None, only_idle: bool = False) -> list[str]:
        """Stop the workers of ``model_id`` (None: of every model); their memory goes back and
        the next request loads the model again. ``only_idle``: leave engines that have
        requests in flight. Returns the unloaded models' ids."""
        return await self.router.unload(model_id, only_idle)

    async def close(self) -> None:
        await self.router.close()


def _probe(for_load: bool) -> HardwareInfo:
    """The hardware probe: in the spare engine worker before a load (started for it where none
    waits), else (or where that fails) in a child process of its own."""
    from runtime.hardware.probe import probe_in_subprocess

    if for_load or spare.waiting():
        try:
            return spare.probe()
        except RuntimeError as e:
            log.warning("the hardware probe in the spare engine worker failed: %s", e)
    return probe_in_subprocess()


async def _kill(engine: WorkerProcess) -> None:
    """End a worker that is stuck loading (it cannot read a shutdown message meanwhile)."""
    process = getattr(engine, "process", None)
    if process is not None and process.is_alive():
        process.kill()
    await engine.stop(timeout=5.0)
