"""The chat list beside the conversation: New chat, search, the conversations (Enter or a click
opens one; Delete, F2 and the context menu delete or rename it, deleting after a question)."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog, QInputDialog, QLabel, QLineEdit, QListView, QMenu, QPushButton, QVBoxLayout, QWidget,
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


class ConversationSidebar(QWidget):
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
        self.search.textChanged.connect(chat.search)
        self.search.returnPressed.connect(self._open_first_match)
        self.list = ChatList()
        self.list.setObjectName("conversationList")
        self.list.setModel(chat.conversations)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu)
        self.list.clicked.connect(self._open)
        self.list.activated.connect(self._open)  # Enter (and a double click) opens the chat
        self.list.setUniformItemSizes(True)
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

    def _open(self, index: QModelIndex) -> None:
        if index.isValid():
            self.chat.select(index.data(KeyRole))

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
