"""Several models at once: a model name maps to a resident engine, or loads one on request.

Residency follows the fit planner: the resident models' planned memory (host RAM and each GPU,
with the KV cache for their contexts) stays within the budget (``residency.Budget``). When a
new model does not fit, idle models are unloaded, least recently used first; a model with
requests in flight is never unloaded to make room, nor a pinned one. If room cannot be made,
the request waits (up to ``--load-wait`` seconds) for busy models to finish, then gets
``NoRoom`` (the API answers 503 with ``Retry-After``). Loads are serialized: requests for a
model that is loading wait for that load, and requests for a resident model never wait for
any load (they take the lock-free path).

One engine per model file, at the context asked for (Ollama's ``num_ctx``, else ``--ctx``, else
the one the fit plan chose: the trained context up to 32768 where memory holds it): a
request for a smaller context (or none) uses it, and one for a larger context reloads the model
with that context once its engine has no request in flight (waiting for that, as for room, up
to ``--load-wait``). Each distinct ``num_ctx`` used to start another worker of the same model,
each kept for its own keep-alive: a few requests could hold gigabytes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from runtime.engine.protocol import Engine, ModelLoadFailed
from runtime.server.models.residency import Budget, Need, Resident

log = logging.getLogger("hearth.router")


class ModelDoesNotFit(ModelLoadFailed):
    """The fit planner says the model cannot be loaded on this machine (or within the budget)."""


class NoRoom(ModelLoadFailed):
    """The model fits the budget, but only once busy or pinned models are gone; try later."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


#: plan(model, ctx) -> FitPlan | None (ctx None: the plan chooses); start(model, plan, ctx) -> a started Engine
PlanFn = Callable[[Any, int | None], Awaitable[Any]]
StartFn = Callable[[Any, Any, int], Awaitable[Engine]]


class Router:
    def __init__(self, plan: PlanFn, start: StartFn, budget: Callable[[], Awaitable[Budget]],
                 default_ctx: int | None, default_keep_alive: float, load_wait: float = 60.0, *,
                 unplanned_ctx: int) -> None:
        self._plan, self._start, self._budget = plan, start, budget
        self.default_ctx, self.default_keep_alive, self.load_wait = default_ctx, default_keep_alive, load_wait
        self.unplanned_ctx = unplanned_ctx  #: the context with no default and no plan (the probe failed)
        self.residents: list[Resident] = []
        self.loads: Counter[str] = Counter()
        self.unloads: Counter[str] = Counter()
        self.loading: tuple[str, int] | None = None
        self._lock = asyncio.Lock()

    # -- lookup ---------------------------------------------------------------------------
    def find(self, model_id: str, ctx: int | None = None) -> Resident | None:
        """The resident engine for ``model_id`` (with a context of at least ``ctx`` when given),
        most recently used first."""
        found = [r for r in self.residents if r.model_id == model_id and (ctx is None or r.ctx >= ctx)]
        return max(found, key=lambda r: (r.engine.alive, r.last_used), default=None)

    def of(self, model: Any) -> list[Resident]:
        """The resident engines of ``model``'s file (named by its id or by its path)."""
        path = str(model.path)
        return [r for r in self.residents if r.model_id == model.id or r.path == path]

    def _serving(self, model: Any, ctx: int | None) -> Resident | None:
        """A live engine of ``model`` whose context is at least ``ctx`` (None: any context)."""
        found = [r for r in self.of(model) if r.engine.alive and (ctx is None or r.ctx >= ctx)]
        return max(found, key=lambda r: r.last_used, default=None)

    def latest(self) -> Resident | None:
        return max(self.residents, key=lambda r: r.last_used, default=None)

    def used(self, residents: list[Resident] | None = None) -> Need:
        total = Need()
        for r in self.residents if residents is None else residents:
            if r.engine.alive:
                total = total.plus(r.need)
        return total

    # -- acquiring -------------------------------------------------------------------------
    async def acquire(self, model: Any, ctx: int | None = None, keep_alive: float | None = None,
                      pin: bool | None = None) -> Resident:
        """The resident engine for ``model`` (a ``ResolvedModel``), loaded if needed. One engine
        per model file: one with a larger context serves a smaller ``ctx``; a larger ``ctx``
        reloads the model with it once its engine is idle (waiting up to ``load_wait``)."""
        r = self._serving(model, ctx)
        if r is not None:
            r.touch(keep_alive, pin)
            return r
        want = ctx or self.default_ctx
        deadline = time.monotonic() + self.load_wait
        plan, need = None, None
        while True:
            async with self._lock:
                r = self._serving(model, ctx)
                if r is not None:  # loaded while this request waited
                    r.touch(keep_alive, pin)
                    return r
                smaller = [x for x in self.of(model) if x.engine.alive]  # replaced by the larger context
                if not any(x.busy for x in smaller):
                    if need is None:
                        plan = await self._plan(model, want)
                        if plan is not None and not plan.fits:
                            raise ModelDoesNotFit(plan.message)
                        need = Need.of(plan)
                        if want is None:  # the default context: the plan chose it
                            want = plan.ctx if plan is not None else self.unplanned_ctx
                    budget = await self._budget()
                    if not budget.fits(need, 1):
                        raise ModelDoesNotFit(self._too_big(model.id, need, budget))
                    if await self._make_room(need, budget, smaller):
                        for x in smaller:  # the model keeps what it was given
                            keep_alive = x.keep_alive if keep_alive is None else keep_alive
                            pin = x.pinned if pin is None else pin
                        assert want is not None  # the plan (or the unplanned default) chose it above
                        return await self._load(model, plan, need, want, keep_alive, pin)
            if time.monotonic() >= deadline:
                if smaller and any(x.busy for x in smaller):
                    raise NoRoom(f"{model.id} is answering requests with a {max(x.ctx for x in smaller)}-token "
                                 f"context; it is reloaded with {want} tokens once they finish: try again then",
                                 retry_after=5)
                busy = ", ".join(r.model_id for r in self.residents if r.busy or r.pinned) or "none"
                raise NoRoom(f"{model.id} does not fit beside the loaded models that are busy or pinned "
                             f"({busy}); try again when their requests finish", retry_after=5)
            await asyncio.sleep(0.1)

    async def _load(self, model: Any, plan: Any, need: Need, ctx: int, keep_alive: float | None,
                    pin: bool | None) -> Resident:
        self.loading = (model.id, ctx)
        try:
            engine = await self._start(model, plan, ctx)
        finally:
            self.loading = None
        r = Resident(model.id, ctx, str(model.path), engine, plan, need,
                     self.default_keep_alive if keep_alive is None else keep_alive, bool(pin))
        self.residents.append(r)
        self.loads[model.id] += 1
        log.info("loaded %s (ctx %d); resident: %s", model.id, ctx, ", ".join(x.model_id for x in self.residents))
        return r

    async def _make_room(self, need: Need, budget: Budget, replaced: Sequence[Resident] = ()) -> bool:
        """Unload dead engines, the ``replaced`` ones (the same model at a smaller context),
        then idle unpinned ones (least recently used first) until ``need`` fits; unloads
        nothing when even that would not be enough."""
        for r in [r for r in self.residents if not r.engine.alive]:
            await self._drop(r)
        keep = [r for r in self.residents if r not in replaced]
        victims: list[Resident] = list(replaced)
        for r in sorted((r for r in keep if not r.busy and not r.pinned), key=lambda r: r.last_used):
            if budget.fits(self.used(keep).plus(need), len(keep) + 1):
                break
            keep.remove(r)
            victims.append(r)
        if not budget.fits(self.used(keep).plus(need), len(keep) + 1):
            return False
        for r in victims:
            log.info("unloading %s (idle, context %d) to make room", r.model_id, r.ctx)
            await self._drop(r)
        return True

    async def _drop(self, r: Resident) -> None:
        # Out of the list before the (awaited) stop: no request can pick the engine up meanwhile.
        if r in self.residents:
            self.residents.remove(r)
            if r.engine.alive:
                self.unloads[r.model_id] += 1
        await r.engine.close()

    @staticmethod
    def _too_big(model_id: str, need: Need, budget: Budget) -> str:
        gib = 1 << 30
        parts = [f"{need.ram / gib:.2f} GiB of RAM"] + [f"{n / gib:.2f} GiB on {d}" for d, n in need.gpus.items()]
        cap = "" if budget.ram is None else f" (RAM budget {budget.ram / gib:.2f} GiB, {budget.source})"
        if budget.max_models == 0:
            return f"{model_id} cannot be loaded: --max-models is 0"
        return f"{model_id} needs {', '.join(parts)}, more than the memory budget{cap}"

    # -- releasing -------------------------------------------------------------------------
    async def unload(self, model_id: str | None = None, only_idle: bool = False,
                     when: Callable[[Resident], bool] | None = None) -> list[str]:
        """Unload ``model_id`` (every context of it; None: every model, pinned ones too).
        ``only_idle``: skip engines with requests in flight. Returns the ids unloaded."""
        async with self._lock:
            gone = [r for r in self.residents if (model_id is None or r.model_id == model_id)
                    and not (only_idle and r.busy) and (when is None or when(r))]
            for r in gone:
                await self._drop(r)
        return [r.model_id for r in gone]

    async def close(self) -> None:
        for r in list(self.residents):
            await self._drop(r)
