"""The blocks an answer is made of: Markdown text, code with colours and a copy button, and
collapsible blocks for tool calls."""

from __future__ import annotations

import html
import json

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QGuiApplication, QPalette
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from app.ui.highlight import as_json, highlight_html, split_fences
from app.ui.markdown import markdown_html, monospace


class WrapLabel(QLabel):
    """A word-wrapped label whose size hints use its real width: QLabel guesses a narrow width,
    which makes a column of long messages ask for more height than it needs."""

    def _height(self) -> int | None:
        return self.heightForWidth(self.width()) if self.width() > 40 else None

    def sizeHint(self) -> QSize:
        h = self._height()
        return super().sizeHint() if h is None else QSize(super().sizeHint().width(), h)

    def minimumSizeHint(self) -> QSize:
        h = self._height()
        return super().minimumSizeHint() if h is None else QSize(40, h)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        if event.oldSize().width() != event.size().width():
            self.updateGeometry()


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


def is_dark() -> bool:
    return QGuiApplication.palette().color(QPalette.ColorRole.Window).lightness() < 128


def small_button(text: str) -> QPushButton:
    b = QPushButton(text)
    b.setObjectName("smallButton")
    b.setFlat(True)
    b.setCursor(Qt.CursorShape.PointingHandCursor)
    return b


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
        lay.addWidget(head)
        lay.addWidget(self.code)
        self.source = ""

    def set_code(self, code: str, language: str) -> None:
        if code == self.source and language == self.language.text():
            return
        self.source = code
        self.language.setText(language or "code")
        self.code.setText("<pre style='margin:0'>" + highlight_html(code, language, is_dark()) + "</pre>")

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
        self.parts: list[QWidget] = []
        self._kinds: list[str] = []
        self._html = ""

    def text(self) -> str:
        """What the blocks show (HTML for text, source for code)."""
        return "\n".join(p.text() if isinstance(p, QLabel) else p.source for p in self.parts)

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
            self.parts = [CodeBlock() if k == "code" else _text_label() for k in kinds]
            for p in self.parts:
                self.lay.addWidget(p)
            self._kinds = kinds
        for part, (kind, lang, body) in zip(self.parts, pieces):
            if kind == "code":
                part.set_code(body, lang)
            elif kind == "plain":
                part.setText("<p style='white-space: pre-wrap'>" + html.escape(body) + "</p>")
            else:
                part.ensurePolished()
                part.setText(markdown_html(body, part.font()))


def _text_label() -> WrapLabel:
    label = WrapLabel()
    label.setObjectName("messageBody")
    label.setWordWrap(True)
    label.setTextFormat(Qt.TextFormat.RichText)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
    label.setOpenExternalLinks(False)
    label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
    return label


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
        self.details = WrapLabel()
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
        mark = {"done": "✓", "failed": "✕", "timeout": "⏱", "denied": "⊘", "pending": "?", "running": "…"}.get(status, "⚙")
        arrow = "▾" if self.toggle.isChecked() else "▸"
        self.toggle.setText(f"{arrow}  {mark}  Tool  {call.get('name', '')}" + (f"  ·  {' · '.join(bits)}" if bits else ""))
        self.setProperty("status", status or "done")
        self.style().unpolish(self)
        self.style().polish(self)
        args = call.get("arguments") or ""
        try:
            args = json.dumps(json.loads(args), indent=2, ensure_ascii=False) if args.strip() else "{}"
        except ValueError:
            pass
        mono = monospace().family()
        parts = [f"<div><b>Arguments</b></div><pre style=\"font-family:'{mono}'\">{html.escape(args)}</pre>"]
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
