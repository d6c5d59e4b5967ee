"""A download's state, progress, speed and ETA, as the manager keeps it and the API shows it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

ACTIVE = ("queued", "downloading", "waiting", "verifying", "converting")
FINAL = ("completed", "failed", "cancelled")


@dataclass(slots=True)
class FileProgress:
    """Bytes of one blob present; shared by every download that needs the blob."""

    done: int = 0


@dataclass(slots=True)
class FileJob:
    name: str
    size: int | None
    sha256: str | None
    etag: str
    progress: FileProgress = field(default_factory=FileProgress)

    def to_dict(self) -> dict:
        return {"name": self.name, "size": self.size, "sha256": self.sha256, "etag": self.etag,
                "done": self.progress.done}


@dataclass(slots=True)
class Download:
    id: str
    ref: str
    model_id: str
    repo_id: str
    commit: str
    files: list[FileJob]
    state: str = "queued"
    error: str | None = None
    path: str | None = None
    created: float = field(default_factory=time.time)
    convert: str | None = None  #: "gptq" / "awq": the files are a checkpoint, converted to a GGUF once fetched
    speed: float = 0.0  #: bytes per second, smoothed
    _mark: tuple[float, int] = (0.0, 0)
    _emitted: float = 0.0

    @property
    def total_bytes(self) -> int | None:
        sizes = [f.size for f in self.files]
        known = [s for s in sizes if s is not None]
        return sum(known) if len(known) == len(sizes) else None

    @property
    def done_bytes(self) -> int:
        return sum(f.progress.done for f in self.files)

    @property
    def eta_s(self) -> float | None:
        total = self.total_bytes
        if self.state != "downloading" or total is None or self.speed <= 0:
            return None
        return max(total - self.done_bytes, 0) / self.speed

    def update_speed(self) -> None:
        now, done = time.monotonic(), self.done_bytes
        t0, d0 = self._mark
        if t0 == 0.0:
            self._mark = (now, done)
        elif now - t0 >= 0.5:
            rate = max(done - d0, 0) / (now - t0)
            self.speed = rate if self.speed == 0 else 0.3 * rate + 0.7 * self.speed
            self._mark = (now, done)

    def to_dict(self) -> dict:
        total = self.total_bytes
        eta = self.eta_s
        return {
            "id": self.id, "model": self.model_id, "ref": self.ref, "repo": self.repo_id,
            "commit": self.commit, "state": self.state, "error": self.error, "path": self.path,
            "total_bytes": total, "done_bytes": self.done_bytes,
            "progress": round(self.done_bytes / total, 4) if total else None,
            "speed_bps": round(self.speed) if self.state == "downloading" else 0,
            "eta_s": round(eta, 1) if eta is not None else None,
            "files": [f.to_dict() for f in self.files], "created": self.created, "convert": self.convert,
        }
