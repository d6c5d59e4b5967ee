"""A line of progress: a thin bar and words, for work that takes seconds or minutes (indexing a
document, loading a model, starting or stopping the service). With a known total the bar fills;
without one it runs as a busy bar and the words count the seconds, so a long wait never looks
like a hang."""

from __future__ import annotations

import time

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QWidget


class ProgressLine(QWidget):
    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("progressLine")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(8)
        self.label = QLabel()
        self.label.setObjectName("statsLabel")
        self.bar = QProgressBar()
        self.bar.setTextVisible(False)
        self.bar.setFixedHeight(6)
        self.bar.setMaximumWidth(220)
        lay.addWidget(self.label, 1)
        lay.addWidget(self.bar)
        self._text = ""
        self._t0 = 0.0
        self._tick = QTimer(self)
        self._tick.setInterval(1000)
        self._tick.timeout.connect(self._show_time)
        self.hide()

    def start(self, text: str) -> None:
        """Work of unknown length: a busy bar and the seconds it has taken so far."""
        self._text, self._t0 = text, time.monotonic()
        self.bar.setRange(0, 0)
        self.label.setText(text)
        self.setAccessibleName(text)
        self._tick.start()
        self.show()

    def set_progress(self, text: str, done: int, total: int) -> None:
        """Work with a known size: the bar fills."""
        self._tick.stop()
        self.bar.setRange(0, max(total, 1))
        self.bar.setValue(min(done, total))
        share = f" · {100 * done / total:.0f} %" if total else ""
        self.label.setText(text + share)
        self.setAccessibleName(self.label.text())
        self.show()

    def finish(self) -> None:
        self._tick.stop()
        self.hide()

    def elapsed(self) -> float:
        return time.monotonic() - self._t0 if self._t0 else 0.0

    def _show_time(self) -> None:
        self.label.setText(f"{self._text} {self.elapsed():.0f} s")
