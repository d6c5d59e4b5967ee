"""Text of a message drawn from a QTextDocument: Markdown or plain text, wrapped at the width
it is given, selectable, with links that open in the browser.

A QLabel given rich text parses HTML into a document of its own and lays it out at several
widths to find its size hints: about 5 ms per paragraph here. This widget keeps the document
that Markdown was read into and lays it out once per width: about 1 ms. Long words (a URL, a
hash) wrap anywhere instead of widening the column.
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, QSize, Qt, QUrl, Signal
from PySide6.QtGui import (
    QAbstractTextDocumentLayout, QDesktopServices, QGuiApplication, QKeySequence, QPainter, QPalette, QTextCursor,
    QTextDocument, QTextOption,
)
from PySide6.QtWidgets import QMenu, QSizePolicy, QWidget

from app.ui.markdown import markdown_document

#: links the text may open: the browser's, never a local file or a program's scheme
OPENABLE = ("http", "https", "mailto")


class RichText(QWidget):
    link_activated = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)
        self.setFocusPolicy(Qt.FocusPolicy.ClickFocus)  # Ctrl+C copies the selection
        self.setMouseTracking(True)
        self.setCursor(Qt.CursorShape.IBeamCursor)
        self.doc = QTextDocument(self)
        self.source = ""
        self._plain = True
        self._width = -1
        self._anchor: int | None = None
        self.text_cursor = QTextCursor(self.doc)
        self._setup(self.doc)

    def _setup(self, doc: QTextDocument) -> None:
        doc.setDocumentMargin(0)
        option = QTextOption()
        option.setWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        doc.setDefaultTextOption(option)

    # content
    def set_markdown(self, text: str) -> None:
        if text == self.source and not self._plain:
            return
        self.source, self._plain = text, False
        self.ensurePolished()
        doc = markdown_document(text, self.font())
        doc.setParent(self)
        self._setup(doc)
        self._replace(doc)

    def set_plain(self, text: str) -> None:
        if text == self.source and self._plain:
            return
        self.source, self._plain = text, True
        self.ensurePolished()
        doc = QTextDocument(self)
        doc.setDefaultFont(self.font())
        self._setup(doc)
        doc.setPlainText(text)
        self._replace(doc)

    def _replace(self, doc: QTextDocument) -> None:
        old, self.doc = self.doc, doc
        old.deleteLater()
        self.text_cursor = QTextCursor(doc)
        self._anchor = None
        self._width = -1
        self.updateGeometry()
        self.update()

    def text(self) -> str:
        """The source: Markdown (or plain text) as the message has it."""
        return self.source

    def select_all(self) -> None:
        self.text_cursor.select(QTextCursor.SelectionType.Document)
        self.update()

    def selected_text(self) -> str:
        return self.text_cursor.selectedText().replace("\u2029", "\n")

    # size
    def _layout_at(self, width: int) -> None:
        if width != self._width:
            self._width = width
            self.doc.setTextWidth(max(width, 10))

    def hasHeightForWidth(self) -> bool:  # noqa: N802 - Qt's name
        return True

    def heightForWidth(self, width: int) -> int:  # noqa: N802
        self._layout_at(width)
        return int(self.doc.size().height() + 0.999)

    def sizeHint(self) -> QSize:  # noqa: N802
        width = self.width() if self.width() > 40 else 400
        return QSize(min(int(self.doc.idealWidth()) + 1, 600), self.heightForWidth(width))

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        return QSize(40, self.heightForWidth(self.width()) if self.width() > 40 else 16)

    def changeEvent(self, event) -> None:  # noqa: N802
        super().changeEvent(event)
        if event.type() == event.Type.FontChange:  # the style sheet's font arrived after the text
            self.doc.setDefaultFont(self.font())
            self._width = -1
            self.updateGeometry()

    # painting
    def paintEvent(self, event) -> None:  # noqa: N802
        self._layout_at(self.width())
        p = QPainter(self)
        ctx = QAbstractTextDocumentLayout.PaintContext()
        pal = QPalette(self.palette())
        pal.setColor(QPalette.ColorRole.Text, self.palette().color(QPalette.ColorRole.WindowText))
        ctx.palette = pal
        ctx.clip = QRectF(event.rect())
        if self.text_cursor.hasSelection():
            sel = QAbstractTextDocumentLayout.Selection()
            sel.cursor = self.text_cursor
            fmt = sel.format
            fmt.setBackground(self.palette().color(QPalette.ColorRole.Highlight))
            fmt.setForeground(self.palette().color(QPalette.ColorRole.HighlightedText))
            sel.format = fmt
            ctx.selections = [sel]
        self.doc.documentLayout().draw(p, ctx)
        p.end()

    # mouse and keys: select, copy, follow links
    def _position(self, pos) -> int:
        return self.doc.documentLayout().hitTest(QPointF(pos), Qt.HitTestAccuracy.FuzzyHit)

    def _link(self, pos) -> str:
        return self.doc.documentLayout().anchorAt(QPointF(pos))

    def mousePressEvent(self, event) -> None:  # noqa: N802
        if event.button() == Qt.MouseButton.LeftButton:
            self._anchor = self._position(event.position())
            self.text_cursor.setPosition(max(self._anchor, 0))
            self.update()
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event) -> None:  # noqa: N802
        link = self._link(event.position())
        self.setCursor(Qt.CursorShape.PointingHandCursor if link else Qt.CursorShape.IBeamCursor)
        if self._anchor is not None and event.buttons() & Qt.MouseButton.LeftButton:
            at = self._position(event.position())
            if at >= 0:
                self.text_cursor.setPosition(max(self._anchor, 0))
                self.text_cursor.setPosition(at, QTextCursor.MoveMode.KeepAnchor)
                self.update()

    def mouseReleaseEvent(self, event) -> None:  # noqa: N802
        link = self._link(event.position())
        if event.button() == Qt.MouseButton.LeftButton and link and not self.text_cursor.hasSelection():
            self.link_activated.emit(link)
            if QUrl(link).scheme() in OPENABLE:
                QDesktopServices.openUrl(QUrl(link))
        self._anchor = None
        super().mouseReleaseEvent(event)

    def mouseDoubleClickEvent(self, event) -> None:  # noqa: N802
        at = self._position(event.position())
        if at >= 0:
            self.text_cursor.setPosition(at)
            self.text_cursor.select(QTextCursor.SelectionType.WordUnderCursor)
            self.update()

    def keyPressEvent(self, event) -> None:  # noqa: N802
        if event.matches(QKeySequence.StandardKey.Copy) and self.text_cursor.hasSelection():
            QGuiApplication.clipboard().setText(self.selected_text())
        elif event.matches(QKeySequence.StandardKey.SelectAll):
            self.select_all()
        else:
            super().keyPressEvent(event)

    def focusOutEvent(self, event) -> None:  # noqa: N802
        super().focusOutEvent(event)
        if event.reason() != Qt.FocusReason.PopupFocusReason and self.text_cursor.hasSelection():
            self.text_cursor.clearSelection()
            self.update()

    def contextMenuEvent(self, event) -> None:  # noqa: N802
        menu = QMenu(self)
        copy = menu.addAction("Copy", lambda: QGuiApplication.clipboard().setText(self.selected_text()))
        copy.setEnabled(self.text_cursor.hasSelection())
        menu.addAction("Select all", self.select_all)
        menu.exec(event.globalPos())
