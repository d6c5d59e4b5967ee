"""Asking before something that cannot be undone (delete a chat, delete a model): a question
with a heading, what will be lost, and the action named on its button."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QMessageBox, QWidget


def confirm(parent: QWidget, heading: str, detail: str, action: str, on_yes: Callable[[], object]) -> QMessageBox:
    """Open the question over ``parent`` (window-modal, without a nested event loop) and call
    ``on_yes`` when the user presses ``action``. The open box is ``parent.confirmation`` (the
    window's tests answer it)."""
    box = QMessageBox(parent)
    box.setObjectName("confirmation")
    box.setIcon(QMessageBox.Icon.NoIcon)  # Fusion's stock icons clash with the theme; the heading says it
    box.setWindowTitle("Hearth")
    box.setText(f"<b style='font-size:15px'>{heading}</b>")
    box.setInformativeText(detail)
    yes = box.addButton(action, QMessageBox.ButtonRole.DestructiveRole)
    yes.setObjectName("dangerButton")
    cancel = box.addButton("Cancel", QMessageBox.ButtonRole.RejectRole)  # no stock icon on it
    box.setDefaultButton(cancel)  # Enter on the question does not destroy anything
    box.setEscapeButton(cancel)
    box.yes_button = yes  # type: ignore[attr-defined]

    def done(_result: int) -> None:
        if box.clickedButton() is yes:
            on_yes()
        if getattr(parent, "confirmation", None) is box:
            parent.confirmation = None  # type: ignore[attr-defined]
        box.deleteLater()

    box.finished.connect(done)
    parent.confirmation = box  # type: ignore[attr-defined]
    box.open()
    return box
