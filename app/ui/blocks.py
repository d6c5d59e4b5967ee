"""The blocks an answer is made of: Markdown text, code with colours and a copy button, and
collapsible blocks for tool calls."""

from __future__ import annotations

import html
import json

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QGuiApplication, QPalette
from PySide6.QtWidgets import (
    QFrame, QHBoxLayout, QLabel, QLayout, QPushButton, QScrollArea, QSizePolicy, QVBoxLayout, QWidget,
)

from app.ui.highlight import as_json, highlight_html, split_fences
from app.ui.markdown import monospace
from app.ui.rich_text import RichText


class ElidedLabel(QLabel):
    """One line that ends in … when it does not fit."""

    def __init__(self, text: str = "") -> None:
        super().__init__()
        self._full = ""
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt's name
        self._full = text
        self.setToolTip(text)
        self._elide()

    def full_text(self) -> str:
        return self._full

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._elide()

    def _elide(self) -> None:
        shown = self.fontMetrics().elidedText(self._full, Qt.TextElideMode.ElideRight, max(self.width(), 40))
        super().setText(shown)


def clear_layout(layout: QLayout) -> None:
    """Take every item out of ``layout``; the widgets among them are deleted (later)."""
    while layout.count():
        item = layout.takeAt(0)
        w = item.widget() if item is not None else None
        if w is not None:
            w.deleteLater()


def is_dark() -> bool:
    return QGuiApplication.palette().color(QPalette.ColorRole.Window).lightness() < 128


def small_button(text: str) -> QPushButton:
    b = QPushButton(text)
    b.setObjectName("smallButton")
    b.setFlat(True)
    b.setCursor(Qt.CursorShape.PointingHandCursor)
    return b


class CodeScroll(QScrollArea):
    """A code block's text, scrolled sideways inside the block: one long line never widens the
    message column (the block takes the column's width; the line scrolls)."""

    def __init__(self, label: QLabel) -> None:
        super().__init__()
        self.setObjectName("codeScroll")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setWidgetResizable(True)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        policy = QSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)
        self.setWidget(label)
        self.label = label

    def heightForWidth(self, width: int) -> int:  # noqa: N802 - Qt's name
        hint = self.label.sizeHint()
        bar = self.horizontalScrollBar().sizeHint().height() if hint.width() > width else 0
        return hint.height() + bar

    def hasHeightForWidth(self) -> bool:  # noqa: N802
        return True

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(min(self.label.sizeHint().width(), 600), self.heightForWidth(self.width()))

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(60, self.heightForWidth(self.width()))

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        if event.oldSize().width() != event.size().width():
            self.updateGeometry()  # the scroll bar may come or go: the height changes

    def wheelEvent(self, event) -> None:  # noqa: N802
        if abs(event.angleDelta().x()) > abs(event.angleDelta().y()):
            super().wheelEvent(event)
        else:
            event.ignore()  # up and down scroll the conversation


class CodeBlock(QFrame):
    """One code block: a header with the language and Copy, the code in colour."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("codeBlock")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        head = QWidget()
        head.setObjectName("codeHeader")
        hl = QHBoxLayout(head)
        hl.setContentsMargins(12, 4, 6, 4)
        self.language = QLabel()
        self.language.setObjectName("codeLanguage")
        self.copy_button = small_button("Copy")
        self.copy_button.clicked.connect(self.copy)
        hl.addWidget(self.language, 1)
        hl.addWidget(self.copy_button)
        self.code = QLabel()
        self.code.setObjectName("codeText")
        self.code.setTextFormat(Qt.TextFormat.RichText)
        self.code.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.code.setFont(monospace())
        self.code.setContentsMargins(12, 8, 12, 10)
        self.code.setWordWrap(False)
        self.code.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.code_scroll = CodeScroll(self.code)  # not ``scroll``: that is QWidget.scroll()
        lay.addWidget(head)
        lay.addWidget(self.code_scroll)
        self.source = ""

    def set_code(self, code: str, language: str) -> None:
        if code == self.source and language == self.language.text():
            return
        self.source = code
        self.language.setText(language or "code")
        self.code.setText("<pre style='margin:0'>" + highlight_html(code, language, is_dark()) + "</pre>")
        self.code_scroll.updateGeometry()

    def copy(self) -> None:
        QGuiApplication.clipboard().setText(self.source)
        self.copy_button.setText("Copied")


class MessageBody(QWidget):
    """An answer's Markdown as text blocks and code blocks; a JSON answer (structured output)
    shows formatted as one JSON block."""

    def __init__(self) -> None:
        super().__init__()
        self.lay = QVBoxLayout(self)
        self.lay.setContentsMargins(0, 0, 0, 0)
        self.lay.setSpacing(8)
        self.parts: list[CodeBlock | RichText] = []
        self._kinds: list[str] = []
        self._html = ""

    def text(self) -> str:
        """What the blocks show, as their sources (Markdown or plain text, and code)."""
        return "\n".join(p.source for p in self.parts)

    def set_markdown(self, text: str, plain: bool = False) -> None:
        pretty = None if plain else as_json(text)
        if plain:
            pieces = [("plain", "", text)]
        elif pretty is not None:
            pieces = [("code", "json", pretty)]
        else:
            pieces = split_fences(text) or [("text", "", "")]
        kinds = [k for k, _, _ in pieces]
        if kinds != self._kinds:
            for p in self.parts:
                self.lay.removeWidget(p)
                p.deleteLater()
            self.parts = [CodeBlock() if k == "code" else _text_block() for k in kinds]
            for p in self.parts:
                self.lay.addWidget(p)
            self._kinds = kinds
        for part, (kind, lang, body) in zip(self.parts, pieces):
            if isinstance(part, CodeBlock):  # the parts follow the kinds: a code piece has a CodeBlock
                part.set_code(body, lang)
            elif kind == "plain":
                part.set_plain(body)
            else:
                part.set_markdown(body)


def _text_block() -> RichText:
    block = RichText()
    block.setObjectName("messageBody")
    return block


#: a tool call's state as a drawn icon (an emoji shows as an empty box without an emoji font)
STATUS_ICONS = {"done": "check", "failed": "x", "timeout": "clock", "denied": "ban", "pending": "question",
                "running": "dots"}


def theme_colours():
    from app.ui.style import theme_for

    return theme_for(is_dark())


def status_icon(status: str):
    from app.ui.icons import icon

    t = theme_colours()
    colour = t.danger if status in ("failed", "timeout") else t.accent if status in ("pending", "running") else t.muted
    return icon(STATUS_ICONS.get(status, "gear"), colour, 16)


def chevron(opened: bool):
    from app.ui.icons import icon

    return icon("chevron-down" if opened else "chevron-right", theme_colours().muted, 14)


STATUS_WORDS = {"pending": "waiting for your approval", "running": "running…", "done": "done",
                "failed": "failed", "timeout": "timed out", "denied": "not allowed"}


class ToolCallBlock(QFrame):
    """One tool call: a header (name, status, time) that opens arguments and result."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("toolBlock")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 6, 10, 6)
        lay.setSpacing(4)
        self.toggle = QPushButton()
        self.toggle.setObjectName("blockToggle")
        self.toggle.setFlat(True)
        self.toggle.setCheckable(True)
        self.toggle.setCursor(Qt.CursorShape.PointingHandCursor)
        self.toggle.toggled.connect(self._toggled)
        self.details = QLabel()
        self.details.setObjectName("toolDetails")
        self.details.setWordWrap(True)
        self.details.setTextFormat(Qt.TextFormat.RichText)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setVisible(False)
        lay.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignLeft)
        lay.addWidget(self.details)
        self.call: dict = {}

    def set_call(self, call: dict) -> None:
        self.call = call
        status = call.get("status") or ""
        bits = [STATUS_WORDS.get(status, status)] if status else []
        if call.get("seconds") is not None:
            bits.append(f"{call['seconds'] * 1000:.0f} ms" if call["seconds"] < 1 else f"{call['seconds']:.1f} s")
        self.toggle.setIcon(status_icon(status))
        opened = "Hide" if self.toggle.isChecked() else "Show"
        self.toggle.setToolTip(f"{opened} the arguments and the result")
        self.toggle.setText(f"Tool  {call.get('name', '')}" + (f"  ·  {' · '.join(bits)}" if bits else ""))
        self.setProperty("status", status or "done")
        self.style().unpolish(self)
        self.style().polish(self)
        args = call.get("arguments") or ""
        try:
            args = json.dumps(json.loads(args), indent=2, ensure_ascii=False) if args.strip() else "{}"
        except ValueError:
            pass
        mono = monospace().family()
        parts = [f"<div><b>Arguments</b></div><pre style=\"font-family:'{mono}'; white-space: pre-wrap\">"
                 f"{html.escape(args)}</pre>"]
        if call.get("server"):
            parts.insert(0, f"<div>from MCP server <b>{html.escape(call['server'])}</b></div>")
        if call.get("result"):
            parts.append(f"<div><b>Result</b></div><pre style=\"font-family:'{mono}'; white-space: pre-wrap\">"
                         f"{html.escape(call['result'])}</pre>")
        self.details.setText("".join(parts))

    def _toggled(self, shown: bool) -> None:
        self.details.setVisible(shown)
        self.set_call(self.call)


class ToolCallsView(QWidget):
    """The tool calls of an answer, one collapsible block each."""

    def __init__(self) -> None:
        super().__init__()
        self.lay = QVBoxLayout(self)
        self.lay.setContentsMargins(0, 0, 0, 0)
        self.lay.setSpacing(4)
        self.blocks: list[ToolCallBlock] = []

    def set_calls(self, calls: list[dict]) -> None:
        while len(self.blocks) < len(calls):
            b = ToolCallBlock()
            self.blocks.append(b)
            self.lay.addWidget(b)
        while len(self.blocks) > len(calls):
            b = self.blocks.pop()
            self.lay.removeWidget(b)
            b.deleteLater()
        for b, c in zip(self.blocks, calls):
            b.set_call(c)

    def text(self) -> str:
        return "\n".join(b.toggle.text() + "\n" + b.details.text() for b in self.blocks)
