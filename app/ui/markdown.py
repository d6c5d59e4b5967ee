"""Markdown to the rich text a QLabel shows, with shaded code blocks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from PySide6.QtGui import (
    QColor, QFont, QFontDatabase, QPalette, QTextBlock, QTextBlockFormat, QTextCharFormat, QTextCursor, QTextDocument,
    QTextFormat,
)
from PySide6.QtWidgets import QApplication


def code_background() -> QColor:
    base = QApplication.palette().color(QPalette.ColorRole.Base)
    return base.darker(108) if base.lightness() > 128 else base.lighter(140)


def markdown_html(text: str, font: QFont | None = None) -> str:
    """Render Markdown (CommonMark with GitHub tables and fences) to HTML; code gets a shaded box.
    ``font``: the body font (the HTML carries it, so a style sheet cannot change it afterwards)."""
    return markdown_document(text, font).toHtml()


def markdown_document(text: str, font: QFont | None = None) -> QTextDocument:
    """Markdown read into a document (what ``RichText`` draws); code gets a shaded box.

    Line breaks follow CommonMark: a single newline inside a paragraph is a space (a model's
    text wrapped at some column reads as one paragraph); two trailing spaces or a backslash
    before the newline break the line; code blocks keep their lines. Headings are a little
    larger than the text (``size_headings``)."""
    doc = QTextDocument()
    if font is not None:
        doc.setDefaultFont(font)
    doc.setMarkdown(text, QTextDocument.MarkdownFeature.MarkdownDialectGitHub)
    size_headings(doc)
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
    return doc


def monospace() -> QFont:
    return QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)


#: a heading's size relative to the body text, by level (deeper levels are the body's size, bold)
HEADING_SCALE = {1: 1.3, 2: 1.15, 3: 1.05}


def size_headings(doc: QTextDocument) -> None:
    """Headings sized relative to the document's font. Qt's Markdown reader gives them HTML's
    sizes (an H1 at 2.4 times the text, poster-sized in a chat or a model card); this sets each
    heading's size from ``HEADING_SCALE`` instead. Call it after ``setMarkdown``."""
    base = doc.defaultFont()
    block = doc.begin()
    while block.isValid():
        level = block.blockFormat().headingLevel()
        if level > 0:
            scale = HEADING_SCALE.get(level, 1.0)
            cursor = QTextCursor(block)
            cursor.setBlockCharFormat(_sized(block.charFormat(), base, scale))
            # PySide6's stubs type a block's iterator as ``object``; it yields QTextBlock.iterator
            for frag in [it.fragment() for it in cast("Iterable[QTextBlock.iterator]", block)]:
                if frag.isValid():
                    cursor.setPosition(frag.position())
                    cursor.setPosition(frag.position() + frag.length(), QTextCursor.MoveMode.KeepAnchor)
                    cursor.setCharFormat(_sized(frag.charFormat(), base, scale))
        block = block.next()


def _sized(fmt: QTextCharFormat, base: QFont, scale: float) -> QTextCharFormat:
    """``fmt`` at ``scale`` times the size of the ``base`` font (a heading's size)."""
    fmt.clearProperty(QTextFormat.Property.FontSizeAdjustment)  # HTML's size step
    if base.pointSizeF() > 0:
        fmt.setFontPointSize(base.pointSizeF() * scale)
    else:
        fmt.setProperty(QTextFormat.Property.FontPixelSize, max(1, round(base.pixelSize() * scale)))
    return fmt
