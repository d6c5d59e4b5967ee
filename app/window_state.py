"""What the window was like when the app last closed: its size (or maximized) and the chat that
was open, kept in a small JSON file in the data directory and put back at the next start."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, fields
from pathlib import Path

log = logging.getLogger("hearth.app")


@dataclass(slots=True)
class WindowState:
    width: int = 0  #: 0: never saved (the window's own default size)
    height: int = 0
    maximized: bool = False
    conversation: int = 0  #: the chat that was open; 0: none


class WindowStateStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> WindowState:
        """The saved state; the defaults where there is none or it cannot be read."""
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return WindowState()
        except (OSError, ValueError) as e:
            log.warning("window state %s unreadable (%s); starting with the defaults", self.path, e)
            return WindowState()
        state = WindowState()
        for f in fields(WindowState):
            value = raw.get(f.name) if isinstance(raw, dict) else None
            # every field is a bool or a count (never negative)
            if type(value) is type(getattr(state, f.name)) and (isinstance(value, bool)
                                                                or isinstance(value, int) and value >= 0):
                setattr(state, f.name, value)
        return state

    def save(self, state: WindowState) -> None:
        from runtime.private_files import write_private

        try:
            write_private(self.path, json.dumps(asdict(state)))
        except OSError as e:  # a full or read-only disk costs the next start its window size, nothing more
            log.warning("window state not saved: %s", e)
