"""Markdown to the rich text a QLabel shows, with shaded code blocks."""

from __future__ import annotations

from PySide6.QtGui import (
    QColor, QFont, QFontDatabase, QPalette, QTextBlockFormat, QTextCharFormat, QTextCursor, QTextDocument, QTextFormat,
)
from PySide6.QtWidgets import QApplication


def code_background() -> QColor:
    base = QApplication.palette().color(QPalette.ColorRole.Base)
    return base.darker(108) if base.lightness() > 128 else base.lighter(140)


def markdown_html(text: str, font: QFont | None = None) -> str:
    """Render Markdown (CommonMark with GitHub tables and fences) to HTML; code gets a shaded box.
    ``font``: the body font (the HTML carries it, so a style sheet cannot change it afterwards)."""
    doc = QTextDocument()
    if font is not None:
        doc.setDefaultFont(font)
    doc.setMarkdown(hard_breaks(text), QTextDocument.MarkdownFeature.MarkdownDialectGitHub)
    mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    shade = code_background()
    block = doc.begin()
    while block.isValid():
        fmt = block.blockFormat()
        if fmt.hasProperty(QTextFormat.Property.BlockCodeFence) or fmt.nonBreakableLines():
            cursor = QTextCursor(block)
            bf = QTextBlockFormat()
            bf.setBackground(shade)
            bf.setLeftMargin(6)
            cursor.mergeBlockFormat(bf)
            cursor.select(QTextCursor.SelectionType.BlockUnderCursor)
            cf = QTextCharFormat()
            cf.setFontFamilies([mono.family()])
            cursor.mergeCharFormat(cf)
        block = block.next()
    return doc.toHtml()


def monospace() -> QFont:
    return QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)


def hard_breaks(text: str) -> str:
    """A chat answer's single newlines are line breaks (poems, lists of lines); Markdown would join
    them, so each gets a hard break, except inside code fences."""
    out, fenced = [], False
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if not fenced and line.strip() and nxt.strip() and not line.endswith("  "):
            line += "  "
        out.append(line)
    return "\n".join(out)
