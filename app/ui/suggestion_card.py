"""The first-run card above the chat: the model suggested for this computer, its download's
progress, and "Use it" once it is here. Two lines at most (the name with its file, then why it
was chosen or how far its download is; what does not fit is cut with "…" and kept in the
tooltip), so an 800x600 window keeps its room for the conversation. Widgets only: the app
fills it and hears its buttons."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QProgressBar, QPushButton, QSizePolicy, QVBoxLayout

from app.qt_models import format_size
from app.ui.blocks import ElidedLabel


class SuggestionCard(QFrame):
    download_requested = Signal()
    use_requested = Signal()
    dismissed = Signal()

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("suggestionCard")
        self.state = "offer"  #: offer | downloading | ready | failed
        outer = QHBoxLayout(self)
        outer.setContentsMargins(14, 8, 10, 8)
        outer.setSpacing(10)
        text = QVBoxLayout()
        text.setSpacing(2)
        first, second = QHBoxLayout(), QHBoxLayout()
        first.setSpacing(8)
        second.setSpacing(8)
        self.heading = QLabel("Suggested:")
        self.heading.setObjectName("suggestionHeading")
        self.heading.setToolTip("The model that suits this computer best (the Models page lists every one)")
        self.name = ElidedLabel()
        self.name.setObjectName("modelName")
        self.name.setMinimumWidth(80)
        self.name.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.detail = ElidedLabel()
        self.detail.setObjectName("modelDetail")
        self.detail.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.reason = ElidedLabel()
        self.reason.setObjectName("modelDetail")
        self.reason.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        self.bar.setFixedHeight(8)
        self.bar.setMaximumWidth(220)
        self.bar.hide()
        self.progress = ElidedLabel()
        self.progress.setObjectName("modelDetail")
        self.progress.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.progress.hide()
        first.addWidget(self.heading)
        first.addWidget(self.name)
        first.addWidget(self.detail, 1)
        second.addWidget(self.reason, 1)
        second.addWidget(self.bar, 1)
        second.addWidget(self.progress, 2)
        text.addLayout(first)
        text.addLayout(second)
        outer.addLayout(text, 1)
        buttons = QHBoxLayout()
        buttons.setSpacing(6)
        self.download_button = QPushButton("Download")
        self.download_button.setObjectName("primaryButton")
        self.download_button.clicked.connect(self.download_requested)
        self.use_button = QPushButton("Use it")
        self.use_button.setObjectName("primaryButton")
        self.use_button.clicked.connect(self.use_requested)
        self.use_button.hide()
        self.later_button = QPushButton("Not now")
        self.later_button.setToolTip("Hide this suggestion; the Models page lists every model with its fit")
        self.later_button.clicked.connect(self._dismiss)
        buttons.addWidget(self.download_button)
        buttons.addWidget(self.use_button)
        buttons.addWidget(self.later_button)
        outer.addLayout(buttons)
        outer.setAlignment(buttons, Qt.AlignmentFlag.AlignVCenter)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Maximum)

    def offer(self, name: str, detail: str, reason: str, installed: bool = False) -> None:
        self.state = "ready" if installed else "offer"
        self.name.setText(name)
        self.detail.setText(detail)
        self.reason.setText(reason)
        self.download_button.setVisible(not installed)
        self.use_button.setVisible(installed)
        self.bar.hide()
        self.reason.show()
        if installed:
            self.reason.setText(f"Already on this computer. {reason}")
        self.progress.hide()

    def show_progress(self, state: str, done: int, total: int | None, speed_bps: int | None = None) -> None:
        """A download's state as the service reports it."""
        self.state = "downloading"
        self.download_button.hide()
        self.reason.hide()  # the second line tells how far the download is
        self.bar.show()
        self.progress.show()
        if total:
            self.bar.setValue(int(1000 * done / total))
            bits = [f"{100 * done / total:.0f} %", f"{format_size(done) or '0 B'} of {format_size(total)}"]
        else:
            self.bar.setRange(0, 0)  # no size yet: a busy bar
            bits = []
        if speed_bps:
            bits.append(f"{format_size(speed_bps)}/s")
        words = {"queued": "Waiting to start", "downloading": "Downloading", "verifying": "Checking the file",
                 "paused": "Paused", "waiting": "Waiting for the network"}
        self.progress.setText(" · ".join([words.get(state, state.capitalize())] + bits))
        if total:
            self.bar.setRange(0, 1000)

    def show_ready(self) -> None:
        self.state = "ready"
        self.bar.setRange(0, 1000)
        self.bar.setValue(1000)
        self.bar.hide()
        self.reason.hide()
        self.download_button.hide()
        self.use_button.show()
        self.progress.show()
        self.progress.setText("Downloaded. Use it in this chat, or pick it in any chat's model list.")
        self.later_button.setText("Close")

    def show_failed(self, error: str) -> None:
        self.state = "failed"
        self.bar.hide()
        self.reason.hide()
        self.progress.show()
        self.progress.setText(f"The download failed: {error}" if error else "The download failed.")
        self.download_button.setText("Try again")
        self.download_button.show()

    def _dismiss(self) -> None:
        self.hide()
        self.dismissed.emit()
