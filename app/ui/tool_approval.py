"""Asking the user before a tool runs: name, server, arguments, and four answers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QLayout, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from app.tool_loop import ALLOW_ALWAYS, ALLOW_CHAT, ALLOW_ONCE, DENY, ToolCall
from app.ui.markdown import monospace


def pretty_arguments(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False) if text.strip() else "{}"
    except ValueError:
        return text


class ToolApprovalDialog(QDialog):
    """Non-blocking: ``answer`` is a future that the buttons (or closing the dialog) resolve."""

    def __init__(self, call: ToolCall, server: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("toolApproval")
        self.setWindowTitle("Hearth — allow a tool?")
        self.answer: asyncio.Future = asyncio.get_event_loop().create_future()
        lay = QVBoxLayout(self)
        lay.setContentsMargins(20, 18, 20, 16)
        lay.setSpacing(10)
        heading = QLabel("Allow a tool call?")
        heading.setObjectName("dialogHeading")
        lay.addWidget(heading)
        title = QLabel(f"The model wants to run <b>{call.name}</b>"
                       + (f" from the MCP server <b>{server}</b>" if server else "") + ".")
        title.setWordWrap(True)
        title.setObjectName("dialogTitle")
        lay.addWidget(title)
        lay.addWidget(QLabel("With these arguments:"))
        args = QPlainTextEdit(pretty_arguments(call.arguments))
        args.setReadOnly(True)
        args.setFont(monospace())
        args.setMaximumHeight(160)
        args.setMinimumWidth(420)
        lay.addWidget(args)
        note = QLabel("A tool can read or change things on this computer or elsewhere. Allow it only if you "
                      "expect this call.")
        note.setWordWrap(True)
        note.setObjectName("settingsMessage")
        lay.addWidget(note)
        row = QHBoxLayout()
        self.deny_button = QPushButton("Deny")
        self.always_button = QPushButton("Always allow")
        self.chat_button = QPushButton("Allow in this chat")
        self.once_button = QPushButton("Allow once")
        self.once_button.setObjectName("primaryButton")
        self.once_button.setDefault(True)
        for b, answer in ((self.deny_button, DENY), (self.always_button, ALLOW_ALWAYS),
                          (self.chat_button, ALLOW_CHAT), (self.once_button, ALLOW_ONCE)):
            b.clicked.connect(lambda _=False, a=answer: self._answer(a))
        row.addWidget(self.deny_button)
        row.addStretch(1)
        row.addWidget(self.always_button)
        row.addWidget(self.chat_button)
        row.addWidget(self.once_button)
        lay.addLayout(row)
        # never narrower than its buttons: the sheet, applied as it shows, widens them
        lay.setSizeConstraint(QLayout.SizeConstraint.SetMinimumSize)
        self.rejected.connect(lambda: self._answer(DENY))

    def _answer(self, answer: str) -> None:
        if not self.answer.done():
            self.answer.set_result(answer)
        self.hide()


async def ask_user(parent: QWidget | None, call: ToolCall, server: str = "",
                   opened: Callable[[ToolApprovalDialog], None] | None = None) -> str:
    """Show the dialog and wait for the user's answer; a cancelled wait (Stop) closes it.
    ``opened`` hears of the dialog as it opens (the chat page keeps it for the window and its tests)."""
    d = ToolApprovalDialog(call, server, parent)
    if opened is not None:
        opened(d)
    d.open()
    try:
        return await d.answer
    finally:
        d.hide()
        d.deleteLater()
