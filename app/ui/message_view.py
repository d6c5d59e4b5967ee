"""The message list of one conversation: a widget per message, bound to ``MessageListModel``."""

from __future__ import annotations

import html

from PySide6.QtCore import QModelIndex, Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QScrollArea, QVBoxLayout, QWidget,
)

from app.conversations import Message
from app.qt_models import MessageListModel
from app.ui.blocks import MessageBody, ToolCallsView, WrapLabel, small_button as _small


def stats_line(meta: dict) -> str:
    """The numbers under an answer: model · tokens/s · TTFT · cached prompt tokens · acceptance."""
    parts = []
    if meta.get("model"):
        parts.append(meta["model"])
    if meta.get("tokens_per_s") is not None:
        parts.append(f"{meta['tokens_per_s']:.1f} tok/s")
    if meta.get("completion_tokens") is not None:
        parts.append(f"{meta['completion_tokens']} tokens")
    if meta.get("ttft_s") is not None:
        parts.append(f"first token {meta['ttft_s'] * 1000:.0f} ms")
    if meta.get("cached_tokens") is not None and meta.get("prompt_tokens") is not None:
        parts.append(f"{meta['cached_tokens']}/{meta['prompt_tokens']} prompt tokens cached")
    if meta.get("acceptance_rate") is not None:
        parts.append(f"draft acceptance {meta['acceptance_rate'] * 100:.0f}%")
    finish = meta.get("finish")
    if finish == "stopped":
        parts.append("stopped")
    elif finish == "length":
        parts.append("cut at the token limit")
    return " · ".join(parts)


class MessageWidget(QFrame):
    copy_requested = Signal(int)
    edit_submitted = Signal(int, str)
    regenerate_requested = Signal()
    citation_clicked = Signal(dict)

    def __init__(self, message: Message) -> None:
        super().__init__()
        self.message = message
        self.setObjectName("userMessage" if message.role == "user" else "assistantMessage")
        self.setFrameShape(QFrame.Shape.NoFrame)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(14, 10, 14, 8)
        lay.setSpacing(4)
        self.role = QLabel("You" if message.role == "user" else "Assistant")
        self.role.setObjectName("roleLabel")
        self.body = MessageBody()
        # reasoning: collapsed above the answer, opened by its toggle
        self.reasoning_toggle = _small("▸  Show reasoning")
        self.reasoning_toggle.setObjectName("blockToggle")
        self.reasoning_toggle.setCheckable(True)
        self.reasoning_toggle.toggled.connect(self._toggle_reasoning)
        self.reasoning = WrapLabel()
        self.reasoning.setObjectName("reasoningBody")
        self.reasoning.setWordWrap(True)
        self.reasoning.setVisible(False)
        self.tool_calls = ToolCallsView()
        self.citations = WrapLabel()
        self.citations.setObjectName("citations")
        self.citations.setWordWrap(True)
        self.citations.setTextFormat(Qt.TextFormat.RichText)
        self.citations.linkActivated.connect(self._citation)
        self.citations.hide()
        self.editor = QPlainTextEdit()
        self.editor.setVisible(False)
        self.editor.setMaximumHeight(140)
        self.stats = WrapLabel()
        self.stats.setObjectName("statsLabel")
        self.stats.setWordWrap(True)
        self.error = WrapLabel()
        self.error.setObjectName("errorLabel")
        self.error.setWordWrap(True)
        buttons = QHBoxLayout()
        buttons.setSpacing(6)
        self.copy_button = _small("Copy")
        self.copy_button.clicked.connect(self._copy)
        self.edit_button = _small("Edit")
        self.edit_button.clicked.connect(self._start_edit)
        self.save_button = _small("Save && resend")
        self.save_button.clicked.connect(self._save_edit)
        self.cancel_button = _small("Cancel")
        self.cancel_button.clicked.connect(self._cancel_edit)
        self.regen_button = _small("Regenerate")
        self.regen_button.clicked.connect(self.regenerate_requested)
        for b in (self.copy_button, self.edit_button, self.save_button, self.cancel_button, self.regen_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        lay.addWidget(self.role)
        lay.addWidget(self.reasoning_toggle, 0, Qt.AlignmentFlag.AlignLeft)
        lay.addWidget(self.reasoning)
        lay.addWidget(self.tool_calls)
        lay.addWidget(self.body)
        lay.addWidget(self.citations)
        lay.addWidget(self.editor)
        lay.addWidget(self.error)
        lay.addWidget(self.stats)
        lay.addLayout(buttons)
        self.save_button.hide()
        self.cancel_button.hide()
        self.regen_button.hide()
        self.edit_button.setVisible(message.role == "user")
        self.refresh()

    def refresh(self) -> None:
        m = self.message
        streaming = m.meta.get("finish") == "streaming"
        text = m.content if m.content or not streaming else "…"
        calls = m.meta.get("tool_calls") or []
        self.body.set_markdown(text, plain=m.role != "assistant")
        self.body.setVisible(bool(m.content) or not calls)
        self.stats.setText(stats_line(m.meta) if m.role == "assistant" and not streaming else "")
        self.stats.setVisible(bool(self.stats.text()))
        reasoning = m.meta.get("reasoning") or ""
        self.reasoning.setText(_plain_html(reasoning))
        self.reasoning_toggle.setVisible(bool(reasoning))
        self.reasoning.setVisible(bool(reasoning) and self.reasoning_toggle.isChecked())
        self.tool_calls.set_calls(calls)
        self.tool_calls.setVisible(bool(calls))
        cites = m.meta.get("citations") or []
        self.citations.setText("<div style='margin-bottom:2px'><b>Sources</b></div>" + "".join(
            f"<div style='margin:3px 0'><a href='cite:{i}'>[{i + 1}] {html.escape(c.get('title', ''))}"
            f"{', page ' + str(c['page']) if c.get('page') else ''}</a>"
            f"&nbsp; <span>“{html.escape(_snippet(c.get('text', '')))}”</span></div>" for i, c in enumerate(cites)))
        self.citations.setVisible(bool(cites))
        self.error.setText(m.meta.get("error", ""))
        self.error.setVisible(bool(m.meta.get("error")))
        self.copy_button.setEnabled(bool(m.content))

    def _citation(self, link: str) -> None:
        cites = self.message.meta.get("citations") or []
        i = int(link.split(":", 1)[1])
        if 0 <= i < len(cites):
            self.citation_clicked.emit(cites[i])

    def _toggle_reasoning(self, shown: bool) -> None:
        self.reasoning_toggle.setText("▾  Hide reasoning" if shown else "▸  Show reasoning")
        self.reasoning.setVisible(shown and bool(self.message.meta.get("reasoning")))

    def set_last_answer(self, last: bool, busy: bool) -> None:
        self.regen_button.setVisible(last and self.message.role == "assistant" and not busy)
        self.edit_button.setEnabled(not busy)

    def _copy(self) -> None:
        QGuiApplication.clipboard().setText(self.message.content)
        self.copy_requested.emit(self.message.id)

    def _start_edit(self) -> None:
        self.editor.setPlainText(self.message.content)
        for w, on in ((self.editor, True), (self.body, False), (self.save_button, True),
                      (self.cancel_button, True), (self.edit_button, False), (self.copy_button, False)):
            w.setVisible(on)
        self.editor.setFocus()

    def _cancel_edit(self) -> None:
        for w, on in ((self.editor, False), (self.body, True), (self.save_button, False),
                      (self.cancel_button, False), (self.edit_button, True), (self.copy_button, True)):
            w.setVisible(on)

    def _save_edit(self) -> None:
        text = self.editor.toPlainText()
        self._cancel_edit()
        self.edit_submitted.emit(self.message.id, text)


def _snippet(text: str, n: int = 110) -> str:
    line = " ".join(w for w in text.split() if not w.strip("#") == "")
    cut = line.find(". ", 0, 60)  # a passage cut mid-sentence: start at the next sentence
    if 0 <= cut and line[:1].islower():
        line = line[cut + 2:]
    return line if len(line) <= n else line[:n - 1].rstrip() + "…"


def _plain_html(text: str) -> str:
    return "<p style='white-space: pre-wrap'>" + html.escape(text) + "</p>"


EMPTY = ("<div style='font-size:22px; font-weight:700'>Start a conversation</div>"
         "<p>Type below and press <b>Ctrl+Enter</b>. The answer comes from a model on this computer; "
         "nothing leaves it.</p>"
         "<p>Pick a model at the top · attach documents with the paper clip · tools of MCP servers "
         "(Settings → MCP servers) are offered to the model, and each call asks you first.</p>"
         "<p style='font-size:12px'>Ctrl+N new chat · Ctrl+F search · Ctrl+L composer · Esc stop</p>")


class MessageView(QScrollArea):
    """Shows the rows of a ``MessageListModel``; follows the bottom while an answer streams."""

    edit_submitted = Signal(int, str)
    regenerate_requested = Signal()
    citation_clicked = Signal(dict)

    def __init__(self, model: MessageListModel) -> None:
        super().__init__()
        self.model = model
        self.busy = False
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        inner = QWidget()
        inner.setObjectName("messageColumn")
        centre = QHBoxLayout(inner)
        centre.setContentsMargins(24, 16, 24, 16)
        body = QWidget()
        body.setObjectName("messageColumn")
        body.setMaximumWidth(900)
        centre.addStretch(1)
        centre.addWidget(body, 20)
        centre.addStretch(1)
        self.column = QVBoxLayout(body)
        self.column.setContentsMargins(0, 0, 0, 0)
        self.column.setSpacing(14)
        self.empty = QLabel(EMPTY)
        self.empty.setObjectName("emptyState")
        self.empty.setTextFormat(Qt.TextFormat.RichText)
        self.empty.setWordWrap(True)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.column.addWidget(self.empty)
        self.column.addStretch(1)
        self.setWidget(inner)
        self.widgets: list[MessageWidget] = []
        self._follow = True
        self.verticalScrollBar().rangeChanged.connect(self._range_changed)
        self.verticalScrollBar().valueChanged.connect(self._scrolled)
        model.modelReset.connect(self._rebuild)
        model.rowsInserted.connect(self._inserted)
        model.rowsRemoved.connect(self._removed)
        model.dataChanged.connect(self._changed)
        self._rebuild()

    def retheme(self, theme) -> None:
        """Code colours follow the theme: the blocks are drawn again."""
        self._rebuild()

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        self._update_actions()

    def _make(self, m: Message) -> MessageWidget:
        w = MessageWidget(m)
        w.edit_submitted.connect(self.edit_submitted)
        w.regenerate_requested.connect(self.regenerate_requested)
        w.citation_clicked.connect(self.citation_clicked)
        return w

    def _rebuild(self) -> None:
        for w in self.widgets:
            self.column.removeWidget(w)
            w.deleteLater()
        self.widgets = []
        for m in self.model.items():
            w = self._make(m)
            self.column.insertWidget(self.column.count() - 1, w)
            self.widgets.append(w)
        self._follow = True
        self._update_actions()

    def _inserted(self, parent: QModelIndex, first: int, last: int) -> None:
        for row in range(first, last + 1):
            w = self._make(self.model.item(row))
            self.column.insertWidget(row + 1, w)  # +1: the empty-state label comes first
            self.widgets.insert(row, w)
        self._follow = True
        self._update_actions()

    def _removed(self, parent: QModelIndex, first: int, last: int) -> None:
        for w in self.widgets[first:last + 1]:
            self.column.removeWidget(w)
            w.deleteLater()
        del self.widgets[first:last + 1]
        self._update_actions()

    def _changed(self, top: QModelIndex, bottom: QModelIndex) -> None:
        for row in range(top.row(), bottom.row() + 1):
            if row < len(self.widgets):
                self.widgets[row].message = self.model.item(row)
                self.widgets[row].refresh()

    def _update_actions(self) -> None:
        self.empty.setVisible(not self.widgets)
        for i, w in enumerate(self.widgets):
            w.set_last_answer(i == len(self.widgets) - 1, self.busy)

    def _scrolled(self, value: int) -> None:
        bar = self.verticalScrollBar()
        self._follow = value >= bar.maximum() - 40

    def _range_changed(self, lo: int, hi: int) -> None:
        if self._follow:
            self.verticalScrollBar().setValue(hi)
