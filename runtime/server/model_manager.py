"""Which model is loaded: one engine worker at a time, swapped on demand, restarted after a crash."""

from __future__ import annotations

import asyncio
import time

from runtime.config import ServeConfig
from runtime.engine.client import EngineClient
from runtime.engine.messages import WorkerSpec
from runtime.store.resolve import ResolvedModel, resolve_model


class ModelManager:
    def __init__(self, config: ServeConfig) -> None:
        self.config = config
        self.engine: EngineClient | None = None
        self.last_error: str | None = None
        self.loaded_at: float | None = None
        self.requests_served = 0
        self._lock = asyncio.Lock()
        self._resolved: dict[str, ResolvedModel] = {}

    def resolve(self, ref: str | None) -> ResolvedModel:
        """Raises ``UnknownModel`` or ``InvalidModelFile`` with a message for the user."""
        ref = ref or self.config.model
        cached = self._resolved.get(ref)
        if cached is not None and cached.path.is_file():
            return cached
        resolved = resolve_model(ref, self.config.data_dir)
        self._resolved[ref] = resolved
        return resolved

    async def engine_for(self, ref: str | None) -> EngineClient:
        """The running engine for ``ref``: loads it, swaps the current model, or restarts a dead worker."""
        model = self.resolve(ref)
        engine = self.engine
        if engine is not None and engine.alive and engine.model_id == model.id:
            return engine
        async with self._lock:
            engine = self.engine
            if engine is not None and engine.alive and engine.model_id == model.id:
                return engine
            if engine is not None:
                if engine.alive:
                    await self._drain(engine)
                await engine.stop()
                self.engine = None
            return await self._load(model)

    async def _drain(self, engine: EngineClient, timeout: float = 300.0) -> None:
        """Let the old model's requests finish before it is swapped out."""
        deadline = time.monotonic() + timeout
        while engine.alive and engine.active and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    async def _load(self, model: ResolvedModel) -> EngineClient:
        c = self.config
        engine = EngineClient(WorkerSpec(
            model.id, str(model.path), n_ctx=c.ctx, parallel=c.parallel, n_batch=c.n_batch,
            n_threads=c.threads, kv_type=c.kv_type, flash_attn=c.flash_attn, block_size=c.block_size,
            prefix_cache=c.prefix_cache, cache_fraction=c.cache_fraction, cache_ram_mib=c.cache_ram))
        try:
            await engine.start()
        except Exception as e:
            self.last_error = str(e)
            raise
        self.engine, self.last_error, self.loaded_at = engine, None, time.time()
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

    async def close(self) -> None:
        if self.engine is not None:
            await self.engine.stop()
            self.engine = None
