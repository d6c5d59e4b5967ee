"""The message box under the conversation: Enter sends, Shift+Enter starts a new line, Tab
leaves the box (as in every chat app); files dropped on it are attached to the next message."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QPlainTextEdit

SEND_KEYS = (Qt.Key.Key_Return, Qt.Key.Key_Enter)


class ComposerInput(QPlainTextEdit):
    """``submitted`` on Enter (or Ctrl+Enter); Shift+Enter inserts a line break."""

    submitted = Signal()
    focus_changed = Signal(bool)  # the box around it shows the focus
    files_dropped = Signal(list)  # local file paths dropped on the box: attached to the next message
    drag_active = Signal(bool)  # files are being dragged over the box (it shows where they go)

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("messageInput")
        self.setTabChangesFocus(True)  # Tab moves on to the buttons; a tab character is never wanted here

    def focusInEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().focusInEvent(event)
        self.focus_changed.emit(True)

    def focusOutEvent(self, event) -> None:  # noqa: N802
        super().focusOutEvent(event)
        self.focus_changed.emit(False)

    @staticmethod
    def _files(event) -> list[str]:
        mime = event.mimeData()
        if not mime.hasUrls():
            return []
        paths = [u.toLocalFile() for u in mime.urls() if u.isLocalFile()]
        return paths if paths and len(paths) == len(mime.urls()) else []

    def dragEnterEvent(self, event) -> None:  # noqa: N802
        if self._files(event):
            event.acceptProposedAction()
            self.drag_active.emit(True)
        else:
            super().dragEnterEvent(event)

    def dragMoveEvent(self, event) -> None:  # noqa: N802
        if self._files(event):
            event.acceptProposedAction()
        else:
            super().dragMoveEvent(event)

    def dragLeaveEvent(self, event) -> None:  # noqa: N802
        self.drag_active.emit(False)
        super().dragLeaveEvent(event)

    def dropEvent(self, event) -> None:  # noqa: N802
        files = self._files(event)
        self.drag_active.emit(False)
        if files:  # files are attached, never pasted into the text as their addresses
            event.acceptProposedAction()
            self.files_dropped.emit(files)
        else:
            super().dropEvent(event)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802
        if event.key() in SEND_KEYS:
            mods = event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier
            if mods & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")  # a line break, whatever else is held
                return
            if mods in (Qt.KeyboardModifier.NoModifier, Qt.KeyboardModifier.ControlModifier):
                self.submitted.emit()
                return
        super().keyPressEvent(event)
