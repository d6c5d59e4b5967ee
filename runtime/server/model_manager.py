"""Which model is loaded: one engine worker at a time, swapped on demand, restarted after a crash."""

from __future__ import annotations

import asyncio
import logging
import time

from runtime.config import ServeConfig
from runtime.engine.client import EngineClient, ModelLoadFailed
from runtime.engine.messages import WorkerSpec
from runtime.server.model_refs import resolve_request_model
from runtime.store.resolve import InvalidModelFile, ModelPathRefused, ResolvedModel, UnknownModel


log = logging.getLogger("hearth.models")


class ModelDoesNotFit(ModelLoadFailed):
    """The fit planner says the model cannot be loaded on this machine."""


class DraftRefused(ModelLoadFailed):
    """The draft model cannot serve this model (another vocabulary, a missing file)."""


class ModelLoadTimeout(ModelLoadFailed):
    """The worker did not finish loading the model within ``load_timeout``; it was killed."""


class ModelManager:
    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.engine: EngineClient | None = None
        self.last_error: str | None = None
        self.loaded_at: float | None = None
        self.requests_served = 0
        self._lock = asyncio.Lock()
        self._resolved: dict[str, ResolvedModel] = {}
        self._hardware = None
        self._hardware_lock = asyncio.Lock()
        self._plan = None  # the fit plan of the loaded model

    async def hardware(self):
        """This machine (probed once, in a child process); available RAM is read fresh."""
        import psutil

        from runtime.hardware.probe import probe_in_subprocess

        async with self._hardware_lock:
            if self._hardware is None:
                self._hardware = await asyncio.get_running_loop().run_in_executor(None, probe_in_subprocess)
        self._hardware.ram.available = int(psutil.virtual_memory().available)
        return self._hardware

    async def plan(self, model: ResolvedModel, freed_bytes: int = 0):
        """The fit plan for loading ``model`` with this service's settings (None if the
        probe fails: loading then goes ahead with the settings as given; a file whose header
        is refused raises ``InvalidModelFile``). ``freed_bytes``:
        RAM that unloading the current model will give back."""
        from runtime.hardware.fit import plan_fit
        from runtime.store.model_shape import shape_of_file

        c = self.config

        def blocking(hw):  # headers are read in a thread: the event loop keeps answering
            try:
                draft_path, _ = self.draft_for(model)
            except DraftRefused:
                draft_path = None  # the load reports it
            draft = shape_of_file(draft_path) if draft_path and draft_path != "ngram" else None
            return plan_fit(shape_of_file(model.path), hw, ctx=c.ctx, kv_type=c.kv_type,
                            n_seq=c.parallel, n_batch=c.n_batch, draft=draft)

        try:
            hw = await self.hardware()
            hw.ram.available += freed_bytes
            return await asyncio.to_thread(blocking, hw)
        except InvalidModelFile:
            raise  # a damaged or hostile file is refused; it must not unload the running model
        except (RuntimeError, OSError, ValueError) as e:
            log.warning("no fit plan for %s: %s", model.id, e)
            return None

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
        return await asyncio.to_thread(self.resolve, ref)

    def forget_resolved(self) -> None:
        """Models were imported or deleted: references are resolved again."""
        self._resolved.clear()

    async def engine_for(self, ref: str | None) -> EngineClient:
        """The running engine for ``ref``: loads it, swaps the current model, or restarts a dead worker."""
        model = await self.resolve_async(ref)
        engine = self.engine
        if engine is not None and engine.alive and engine.model_id == model.id:
            return engine
        async with self._lock:
            engine = self.engine
            if engine is not None and engine.alive and engine.model_id == model.id:
                return engine
            # Plan first: a model that cannot fit must not unload the one that runs.
            running = self._plan.ram_bytes if engine is not None and engine.alive and self._plan else 0
            plan = await self.plan(model, freed_bytes=running)
            if plan is not None and not plan.fits:
                raise ModelDoesNotFit(plan.message)
            if engine is not None:
                if engine.alive:
                    await self._drain(engine)
                await engine.stop()
                self.engine = None
            return await self._load(model, plan)

    async def _drain(self, engine: EngineClient, timeout: float = 300.0) -> None:
        """Let the old model's requests finish before it is swapped out."""
        deadline = time.monotonic() + timeout
        while engine.alive and engine.active and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    def draft_for(self, model: ResolvedModel, catalog: dict | None = None) -> tuple[str | None, str | None]:
        """(draft file or "ngram", draft id) for ``model``: ``--draft``, else the catalog
        entry's optional ``draft`` (skipped when that model is not downloaded)."""
        ref = self.config.draft
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

    async def _load(self, model: ResolvedModel, plan) -> EngineClient:
        c = self.config
        draft, draft_id = await asyncio.to_thread(self.draft_for, model)
        n_ctx = min(c.ctx, plan.ctx) if plan is not None else c.ctx
        gpu_layers = plan.gpu_layers if plan is not None else 0
        engine = EngineClient(WorkerSpec(
            model.id, str(model.path), n_ctx=n_ctx, parallel=c.parallel, n_batch=c.n_batch,
            n_gpu_layers=gpu_layers,
            n_threads=c.threads, kv_type=c.kv_type, flash_attn=c.flash_attn, block_size=c.block_size,
            prefix_cache=c.prefix_cache, cache_fraction=c.cache_fraction, cache_ram_mib=c.cache_ram,
            draft=draft, draft_id=draft_id))
        try:
            await asyncio.wait_for(engine.start(), c.load_timeout)
        except asyncio.TimeoutError:
            self.last_error = (f"loading {model.id} took longer than {c.load_timeout:g} s (--load-timeout); "
                               "its worker was stopped")
            await _kill(engine)
            raise ModelLoadTimeout(self.last_error) from None
        except Exception as e:
            self.last_error = str(e)
            if isinstance(e, ModelLoadFailed) and str(e).startswith("draft model"):
                raise DraftRefused(str(e)) from None
            raise
        self.engine, self.last_error, self.loaded_at, self._plan = engine, None, time.time(), plan
        return engine

    def status(self) -> dict:
        e = self.engine
        if e is None:
            state = "idle"
        elif e.alive:
            state = "running"
        else:
            state = "crashed"
        return {"state": state, "model": e.model_id if e else None, "pid": e.pid if e else None,
                "error": (e.error if e and not e.alive else None) or self.last_error}

    async def unload(self, when=lambda engine: True) -> str | None:
        """Stop the loaded model's worker (its memory goes back); the next request loads a model
        again. With ``when``, only if ``when(engine)`` holds (checked under the load lock, so a
        request cannot pick the engine up while it stops). Returns the unloaded model's id."""
        async with self._lock:
            engine = self.engine
            if engine is None or not when(engine):
                return None
            self.engine, self._plan = None, None
            await engine.stop()
            return engine.model_id

    async def close(self) -> None:
        if self.engine is not None:
            await self.engine.stop()
            self.engine = None


async def _kill(engine: EngineClient) -> None:
    """End a worker that is stuck loading (it cannot read a shutdown message meanwhile)."""
    process = getattr(engine, "process", None)
    if process is not None and process.is_alive():
        process.kill()
    await engine.stop(timeout=5.0)
