"""Markdown to the rich text a QLabel shows, with shaded code blocks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from PySide6.QtCore import Qt
from PySide6.QtGui import (
    QColor, QFont, QFontDatabase, QPalette, QTextBlock, QTextBlockFormat, QTextCharFormat, QTextCursor, QTextDocument,
    QTextFormat,
)
from PySide6.QtWidgets import QApplication

from app.ui.latex import Math, find_math, latex_html

#: a piece of math while Qt reads the Markdown around it: private-use characters and its number
_MARK = "\ue000{}\ue001"

#: display math's size relative to the text
DISPLAY_SCALE = 1.2


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
    larger than the text (``size_headings``). Math (``$x^2$``, ``$$...$$``, ``\\(...\\)``,
    ``\\[...\\]``) is drawn by ``app.ui.latex``; display math gets a line of its own, centred."""
    doc = QTextDocument()
    if font is not None:
        doc.setDefaultFont(font)
    maths = find_math(text)
    doc.setMarkdown(_marked(text, maths), QTextDocument.MarkdownFeature.MarkdownDialectGitHub)
    size_headings(doc)
    if maths:
        put_math(doc, text, maths)
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
        elif block.textList() is None and not QTextCursor(block).currentTable():
            _spaced(block, fmt)
        block = block.next()
    return doc


#: the text's line height (percent of the font's): prose reads easier a little apart
LINE_HEIGHT = 135


def _spaced(block, fmt: QTextBlockFormat) -> None:
    """A paragraph's lines a little apart, and display math set off from the text around it."""
    bf = QTextBlockFormat()
    bf.setLineHeight(LINE_HEIGHT, QTextBlockFormat.LineHeightTypes.ProportionalHeight.value)
    if fmt.alignment() & Qt.AlignmentFlag.AlignHCenter:
        bf.setTopMargin(max(fmt.topMargin(), 6))
        bf.setBottomMargin(max(fmt.bottomMargin(), 6))
    QTextCursor(block).mergeBlockFormat(bf)


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


def _marked(text: str, maths: list[Math]) -> str:
    """``text`` with each piece of math replaced by its mark (Markdown must not read ``a_1*b``)."""
    out, at = [], 0
    for n, m in enumerate(maths):
        out += [text[at:m.start], _MARK.format(n)]
        at = m.end
    return "".join(out) + text[at:]


def put_math(doc: QTextDocument, text: str, maths: list[Math]) -> None:
    """Each mark in ``doc`` replaced by its math drawn as rich text; in code (an indented block
    that ``find_math`` could not tell), by the source as written."""
    base = doc.defaultFont()
    for n, m in enumerate(maths):
        cursor = doc.find(_MARK.format(n))
        if cursor.isNull():
            continue
        if _in_code(cursor):
            cursor.insertText(text[m.start:m.end])
            continue
        markup = latex_html(m.tex)
        if not m.display:
            around = _format_at(cursor)
            start = cursor.selectionStart()
            cursor.insertHtml(markup)
            _keep_size_and_weight(cursor, start, around)
            continue
        size = (f"font-size:{base.pointSizeF() * DISPLAY_SCALE:.1f}pt" if base.pointSizeF() > 0
                else f"font-size:{max(1, round(base.pixelSize() * DISPLAY_SCALE))}px")
        _own_line(cursor)
        cursor.insertHtml(f'<span style="{size}">{markup}</span>')


def _in_code(cursor: QTextCursor) -> bool:
    """The selection is code: a fenced block, or text Qt set in a fixed font (indented code)."""
    fmt = cursor.block().blockFormat()
    if fmt.hasProperty(QTextFormat.Property.BlockCodeFence) or fmt.nonBreakableLines():
        return True
    chars = _format_at(cursor)
    return chars.fontFixedPitch() or bool(set(chars.fontFamilies() or []) & {"monospace", monospace().family()})


def _format_at(cursor: QTextCursor) -> QTextCharFormat:
    """The character format of the selection's first character."""
    at = QTextCursor(cursor.document())
    at.setPosition(cursor.selectionStart() + 1)
    return at.charFormat()


def _keep_size_and_weight(cursor: QTextCursor, start: int, around: QTextCharFormat) -> None:
    """The math inserted from ``start`` to the cursor takes the size (a heading's) and weight (bold
    text's) of the text around it: inserted HTML has the document's default font."""
    keep = QTextCharFormat()
    if around.hasProperty(QTextFormat.Property.FontPointSize):
        keep.setFontPointSize(around.fontPointSize())
    if around.hasProperty(QTextFormat.Property.FontPixelSize):
        keep.setProperty(QTextFormat.Property.FontPixelSize, around.property(QTextFormat.Property.FontPixelSize))
    if around.fontWeight() > QFont.Weight.Normal:
        keep.setFontWeight(around.fontWeight())
    if keep.properties():
        end = cursor.position()
        cursor.setPosition(start)
        cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        cursor.mergeCharFormat(keep)


def _own_line(cursor: QTextCursor) -> None:
    """Display math on a line of its own: a block of its own, centred, where the block is a plain
    paragraph; a line of its own in a list item or a table cell. ``cursor`` selects the mark."""
    block = cursor.block()
    start, end = cursor.selectionStart() - block.position(), cursor.selectionEnd() - block.position()
    before, after = block.text()[:start], block.text()[end:]
    mark = cursor.selectedText()
    alone = block.textList() is None and cursor.currentTable() is None
    # the soft breaks around the math are spaces now
    cut_before, cut_after = len(before) - len(before.rstrip()), len(after) - len(after.lstrip())
    cursor.setPosition(block.position() + start - cut_before)
    cursor.setPosition(block.position() + end + cut_after, QTextCursor.MoveMode.KeepAnchor)
    if alone:
        cursor.insertText("")
        if before.strip():
            cursor.insertBlock()
        if after.strip():
            cursor.insertBlock()
            cursor.movePosition(QTextCursor.MoveOperation.PreviousBlock)
        centred = QTextBlockFormat()
        centred.setAlignment(Qt.AlignmentFlag.AlignHCenter)
        cursor.mergeBlockFormat(centred)
        cursor.insertText(mark)
    else:
        cursor.insertText(("\u2028" if before.strip() else "") + mark + ("\u2028" if after.strip() else ""))
    # select the mark again: the caller replaces it
    found = cursor.document().find(mark)
    cursor.setPosition(found.selectionStart())
    cursor.setPosition(found.selectionEnd(), QTextCursor.MoveMode.KeepAnchor)
