"""What a resident model holds and what the service may hold: planned memory per device, the budget.

A resident model's memory is the fit planner's estimate for it (weights, the KV cache for its
context, compute buffers, overhead; on the CPU and on each GPU), not a measurement: the router
decides before a worker starts whether the next model fits beside the ones already loaded.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from runtime.engine.protocol import Engine

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_SCALE = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes from "8G", "6.5GiB", "512M", "1073741824" (binary units: 1G = 1 GiB). ValueError otherwise."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"{text!r} is not a size such as 8G, 6.5GiB or 512M")
    n = int(float(m.group(1)) * _SCALE[m.group(2).lower()])
    if n <= 0:
        raise ValueError(f"the size must be positive, got {text!r}")
    return n


@dataclass(slots=True)
class Need:
    """Planned bytes of host memory and of each GPU (by device name)."""

    ram: int = 0
    gpus: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, plan: Any) -> "Need":
        """From a ``runtime.hardware.fit.FitPlan`` (None: unknown, counted as nothing)."""
        if plan is None:
            return cls()
        return cls(plan.ram_bytes, {d.name: d.total for d in plan.devices[1:] if d.total})

    def plus(self, other: "Need") -> "Need":
        gpus = dict(self.gpus)
        for name, n in other.gpus.items():
            gpus[name] = gpus.get(name, 0) + n
        return Need(self.ram + other.ram, gpus)

    def to_dict(self) -> dict:
        return {"ram_bytes": self.ram, "gpu_bytes": dict(self.gpus), "total_bytes": self.ram + sum(self.gpus.values())}


@dataclass(slots=True)
class Budget:
    """What the resident models together may plan to use. ``ram`` None: not known (no
    hardware probe), only ``max_models`` bounds residency then. A GPU missing from ``gpus``
    is not bounded (a plan that uses it was made against its free memory)."""

    ram: int | None = None
    gpus: dict[str, int] = field(default_factory=dict)
    max_models: int | None = None
    source: str = "none"  #: planner | --memory-budget | none

    def fits(self, used: Need, count: int) -> bool:
        """Whether ``count`` models planning ``used`` in all stay within the budget."""
        if self.max_models is not None and count > self.max_models:
            return False
        if self.ram is not None and used.ram > self.ram:
            return False
        return all(n <= self.gpus[name] for name, n in used.gpus.items() if name in self.gpus)

    def to_dict(self) -> dict:
        return {"ram_bytes": self.ram, "gpu_bytes": dict(self.gpus), "max_models": self.max_models,
                "source": self.source}


def default_budget(hw: Any, max_models: int | None, cap: int | None) -> Budget:
    """The planner's safe amount on this machine with nothing loaded (available RAM and each
    GPU's free memory, less the planner's reserves and margin), capped at ``cap`` per device."""
    from runtime.hardware.fit import GPU_RESERVE_BYTES, RAM_RESERVE_BYTES
    from runtime.hardware.memory import SAFETY_FRACTION

    def safe(free: int, reserve: int) -> int:
        n = max(0, int((free - reserve) / (1 + SAFETY_FRACTION)))
        return min(n, cap) if cap is not None else n

    gpus = {g.device or g.name: safe(int(g.memory_free), GPU_RESERVE_BYTES) for g in hw.usable_gpus}
    return Budget(safe(int(hw.ram.available), RAM_RESERVE_BYTES), gpus, max_models,
                  "--memory-budget" if cap is not None else "planner")


@dataclass(slots=True, eq=False)
class Resident:
    """One loaded engine: which model at which asked-for context, what it plans to hold,
    and when it may be unloaded (``keep_alive`` seconds after its last request; < 0: never)."""

    model_id: str
    ctx: int  #: the context asked for (the plan may have lowered it to fit)
    path: str
    engine: Engine
    plan: Any
    need: Need
    keep_alive: float
    pinned: bool = False
    loaded_at: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.monotonic)

    @property
    def busy(self) -> bool:
        return self.engine.alive and self.engine.active > 0

    def touch(self, keep_alive: float | None = None, pin: bool | None = None) -> None:
        if keep_alive is not None:
            self.keep_alive = keep_alive
        if pin is not None:
            self.pinned = pin
        self.last_used = time.monotonic()

    def expired(self) -> bool:
        """Idle for its keep-alive (a pinned or busy model never expires)."""
        if self.busy:
            self.last_used = time.monotonic()  # the keep-alive counts from the last request's end
            return False
        return not self.pinned and self.keep_alive >= 0 and time.monotonic() - self.last_used >= self.keep_alive

    def expires_at(self) -> float | None:
        """Wall-clock time it unloads at if no request comes (None: never)."""
        if self.pinned or self.keep_alive < 0:
            return None
        idle = 0.0 if self.busy else time.monotonic() - self.last_used
        return time.time() + max(0.0, self.keep_alive - idle)
