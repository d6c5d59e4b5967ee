"""An upstream's health as Hearth saw it: up, degraded (some requests failed), down
(unreachable, or failing every time), or unknown before the first contact, with the last error."""

from __future__ import annotations

import time
from dataclasses import dataclass

#: consecutive failures after which a reachable upstream counts as down
DOWN_AFTER = 3
ORDER = {"up": 0, "unknown": 1, "degraded": 2, "down": 3}


@dataclass(slots=True)
class Health:
    state: str = "unknown"
    last_error: str | None = None
    last_error_at: float | None = None
    last_ok_at: float | None = None
    failures: int = 0  #: consecutive
    requests: int = 0
    errors: int = 0

    def ok(self) -> None:
        self.state, self.failures, self.last_ok_at = "up", 0, time.time()

    def failed(self, error: str, unreachable: bool = False) -> None:
        self.failures += 1
        self.errors += 1
        self.last_error, self.last_error_at = error, time.time()
        self.state = "down" if unreachable or self.failures >= DOWN_AFTER else "degraded"

    @property
    def rank(self) -> int:
        """Failover order: up first, down last."""
        return ORDER.get(self.state, 1)

    def to_dict(self) -> dict:
        return {"state": self.state, "last_error": self.last_error, "last_error_at": self.last_error_at,
                "last_ok_at": self.last_ok_at, "consecutive_failures": self.failures,
                "requests": self.requests, "errors": self.errors}
