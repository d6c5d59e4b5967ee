"""The chat list beside the conversation: New chat, search, the conversations (Enter or a click
opens one; Delete, F2 and the context menu delete or rename it, deleting after a question).

While a search is typed, each chat found shows under its title a line of the first message that
matched, the match in bold; opening it scrolls the conversation to that message."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter
from PySide6.QtWidgets import (
    QFileDialog, QInputDialog, QLabel, QLineEdit, QListView, QMenu, QPushButton, QStyle, QStyledItemDelegate,
    QStyleOptionViewItem, QVBoxLayout, QWidget,
)

from app.background import Run
from app.chat import ChatService
from app.conversations import Conversation
from app.qt_models import KeyRole
from app.ui.confirm import confirm

NO_CHATS = "No chats yet.\nPress New chat (Ctrl+N),\nor just type below."
NO_MATCH = "No chat matches “{}”."


class ChatList(QListView):
    """The list of chats; Delete asks to delete the current one, F2 renames it."""

    delete_pressed = Signal()
    rename_pressed = Signal()

    def keyPressEvent(self, event) -> None:  # noqa: N802 - Qt's name
        if event.key() == Qt.Key.Key_Delete:
            self.delete_pressed.emit()
        elif event.key() == Qt.Key.Key_F2:
            self.rename_pressed.emit()
        else:
            super().keyPressEvent(event)


class HitDelegate(QStyledItemDelegate):
    """A chat in the list: its title, and while a search is typed, under it a line of the first
    message that matched with the match in bold (the text before it elided on the left, so the
    match stays in sight in a narrow list)."""

    PAD_X, PAD_Y, GAP = 10, 8, 2

    def __init__(self, chat: ChatService, parent=None) -> None:
        super().__init__(parent)
        self.chat = chat

    def hit(self, index: QModelIndex | QPersistentModelIndex):
        return self.chat.search_hits.get(index.data(KeyRole)) if self.chat.search_text else None

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:  # noqa: N802 - Qt's name
        size = super().sizeHint(option, index)
        if self.hit(index) is not None:
            size.setHeight(size.height() + QFontMetrics(self._small(option.font)).height() + self.GAP)
        return size

    @staticmethod
    def _small(font: QFont) -> QFont:
        f = QFont(font)
        if f.pointSizeF() > 0:
            f.setPointSizeF(f.pointSizeF() * 0.9)
        elif f.pixelSize() > 0:
            f.setPixelSize(max(9, round(f.pixelSize() * 0.9)))
        return f

    def paint(self, painter: QPainter, option: QStyleOptionViewItem,
              index: QModelIndex | QPersistentModelIndex) -> None:
        hit = self.hit(index)
        if hit is None:
            super().paint(painter, option, index)
            return
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        title = opt.text
        opt.text = ""  # the background, selection and focus as usual; the two lines drawn here
        widget = opt.widget
        style = widget.style() if widget is not None else None
        if style is not None:
            style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, widget)
        from app.ui.blocks import theme_colours

        t = theme_colours()
        r = opt.rect.adjusted(self.PAD_X, self.PAD_Y - 2, -self.PAD_X, -2)
        painter.save()
        fm = QFontMetrics(opt.font)
        painter.setFont(opt.font)
        painter.setPen(opt.palette.text().color())
        painter.drawText(QRect(r.left(), r.top(), r.width(), fm.height()), Qt.AlignmentFlag.AlignVCenter,
                         fm.elidedText(title, Qt.TextElideMode.ElideRight, r.width()))
        small = self._small(opt.font)
        bold = QFont(small)
        bold.setBold(True)
        sm, bm = QFontMetrics(small), QFontMetrics(bold)
        y, h = r.top() + fm.height() + self.GAP, sm.height()
        width = r.width()
        def fit(text: str, metrics: QFontMetrics, room: int, mode: Qt.TextElideMode) -> str:
            # elidedText may cut a text that just fits (a trailing space): only what does not fit
            return text if metrics.horizontalAdvance(text) <= room else metrics.elidedText(text, mode, room)

        match = fit(hit.match, bm, max(0, width * 2 // 3), Qt.TextElideMode.ElideRight)
        mw = bm.horizontalAdvance(match)
        before_room = max(0, min(sm.horizontalAdvance(hit.before), (width - mw) // 3
                                 if sm.horizontalAdvance(hit.after) > (width - mw) * 2 // 3 else width - mw))
        before = fit(hit.before, sm, before_room, Qt.TextElideMode.ElideLeft) if before_room else ""
        x = r.left()
        muted = QColor(t.muted)
        for text, font, metrics, colour in ((before, small, sm, muted), (match, bold, bm, QColor(t.text)),
                                            (None, small, sm, muted)):
            if text is None:
                text = fit(hit.after, sm, max(0, r.right() - x), Qt.TextElideMode.ElideRight)
            painter.setFont(font)
            painter.setPen(colour)
            painter.drawText(QRect(x, y, max(0, r.right() - x + 1), h), Qt.AlignmentFlag.AlignVCenter, text)
            x += metrics.horizontalAdvance(text)
        painter.restore()


class ConversationSidebar(QWidget):
    #: a chat opened from the search: the id of the message that matched, to scroll to
    match_opened = Signal(int)

    def __init__(self, chat: ChatService, run: Run | None = None) -> None:
        super().__init__()
        self.chat = chat
        self.run = run  # schedules a coroutine
        self.confirmation = None  # the open delete question, if any
        self.setObjectName("sidebar")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 14, 12, 12)
        lay.setSpacing(10)
        self.new_button = QPushButton("New chat")
        self.new_button.setToolTip("New chat (Ctrl+N)")
        self.new_button.setObjectName("primaryButton")
        self.new_button.clicked.connect(lambda: chat.new_conversation())
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search chats (Ctrl+F)")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self._search_changed)
        self.search.returnPressed.connect(self._open_first_match)
        self.list = ChatList()
        self.list.setObjectName("conversationList")
        self.list.setModel(chat.conversations)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu)
        self.list.clicked.connect(self._open)
        self.list.activated.connect(self._open)  # Enter (and a double click) opens the chat
        self.list.setUniformItemSizes(True)  # while no search is typed: every row one line
        self.delegate = HitDelegate(chat, self.list)
        self.list.setItemDelegate(self.delegate)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setAccessibleName("Chats")
        self.list.delete_pressed.connect(self._delete_current)
        self.list.rename_pressed.connect(self._rename_current)
        self.setMinimumWidth(180)
        self.empty = QLabel(NO_CHATS)
        self.empty.setObjectName("statsLabel")
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.setWordWrap(True)
        lay.addWidget(self.new_button)
        lay.addWidget(self.search)
        lay.addWidget(self.empty)
        lay.addWidget(self.list, 1)
        model = chat.conversations
        chat.current_changed.connect(self._follow_current)
        model.modelReset.connect(lambda: self._follow_current(chat.current))
        for sig in (model.rowsInserted, model.rowsRemoved):
            sig.connect(lambda *_: self._show_empty())
        self._follow_current(chat.current)

    def _search_changed(self, text: str) -> None:
        # rows with a snippet are two lines, the others one: the list measures each while searching
        self.list.setUniformItemSizes(not text.strip())
        self.chat.search(text)

    def snippet(self, row: int) -> str:
        """The line under the title of the chat in ``row``: where the search matched ("" when
        no search is typed or the chat matched by its title alone)."""
        hit = self.delegate.hit(self.chat.conversations.index(row))
        return hit.snippet if hit is not None else ""

    def _open(self, index: QModelIndex) -> None:
        if not index.isValid():
            return
        cid = index.data(KeyRole)
        hit = self.delegate.hit(index)
        self.chat.select(cid)
        if hit is not None:
            self._show_match(hit.message_id)

    def _show_match(self, message_id: int) -> None:
        """Scroll the conversation to the message the search found (or, where that one is an
        older version not shown, the first shown message that contains the text)."""
        query = self.chat.search_text.casefold()
        shown = self.chat.messages.items()
        if all(m.id != message_id for m in shown):
            message_id = next((m.id for m in shown if query in m.content.casefold()), 0)
        if message_id:
            self.match_opened.emit(message_id)

    def _open_first_match(self) -> None:
        """Enter in the search box opens the first chat found and moves to the list."""
        first = self.chat.conversations.index(0)
        if first.isValid():
            self.list.setCurrentIndex(first)
            self._open(first)
            self.list.setFocus()

    def _show_empty(self) -> None:
        """The empty state only when the list is empty, and it says why."""
        query = self.search.text().strip()
        self.empty.setText(NO_MATCH.format(query) if query else NO_CHATS)
        self.empty.setVisible(self.chat.conversations.rowCount() == 0)

    def _follow_current(self, c: Conversation | None) -> None:
        self._show_empty()
        row = self.chat.conversations.row_of(c.id) if c else None
        if row is None:
            self.list.clearSelection()
        else:
            self.list.setCurrentIndex(self.chat.conversations.index(row))

    def _menu(self, pos) -> None:
        index = self.list.indexAt(pos)
        menu = QMenu(self)
        if index.isValid():
            cid = index.data(KeyRole)
            menu.addAction("Rename…", lambda: self.rename(cid))
            menu.addAction("Export as Markdown…", lambda: self.export(cid, "markdown"))
            menu.addAction("Export as JSON…", lambda: self.export(cid, "json"))
            menu.addSeparator()
            menu.addAction("Delete…", lambda: self.ask_delete(cid))
            menu.addSeparator()
        menu.addAction("Import a chat…", self.import_chat)
        menu.exec(self.list.viewport().mapToGlobal(pos))

    def export(self, cid: int, fmt: str) -> None:
        """Save a chat as Markdown (to read or share) or JSON (to import again)."""
        c = self.chat.store.get(cid)
        if c is None or self.run is None:
            return
        safe = "".join(ch if ch.isalnum() or ch in " -_" else "-" for ch in c.title).strip() or "chat"
        ext, kind = (".md", "Markdown (*.md)") if fmt == "markdown" else (".json", "Hearth chat (*.json)")
        path, _ = QFileDialog.getSaveFileName(self, "Export a chat", safe + ext, kind)
        if path:
            self.run(self.chat.export_chat(cid, path, fmt))

    def import_chat(self) -> None:
        if self.run is None:
            return
        path, _ = QFileDialog.getOpenFileName(self, "Import a chat", "", "Hearth chat (*.json)")
        if path:
            self.run(self.chat.import_chat(path))

    def _delete_current(self) -> None:
        index = self.list.currentIndex()
        if index.isValid():
            self.ask_delete(index.data(KeyRole))

    def _rename_current(self) -> None:
        index = self.list.currentIndex()
        if index.isValid():
            self.rename(index.data(KeyRole))

    def ask_delete(self, cid: int) -> None:
        """Delete a chat after a question that names it and what goes with it."""
        c = self.chat.store.get(cid)
        if c is None:
            return
        n = len(self.chat.store.messages(cid))
        confirm(self, f"Delete “{c.title}”?",
                f"Its {n} message{'s' if n != 1 else ''} will be removed from this computer. This cannot be undone.",
                "Delete chat", lambda: self.chat.delete(cid))

    def rename(self, cid: int) -> None:
        c = self.chat.store.get(cid)
        if c is None:
            return
        title, ok = QInputDialog.getText(self, "Rename chat", "Title:", text=c.title)
        if ok:
            self.chat.rename(cid, title)
