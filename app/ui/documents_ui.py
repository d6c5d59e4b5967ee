"""Documents in the chat: the strip of attached documents, the library dialog, and the
passage a citation points at."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog, QDialogButtonBox, QFileDialog, QHBoxLayout, QLabel, QListWidget, QListWidgetItem, QPlainTextEdit,
    QPushButton, QVBoxLayout, QWidget,
)

from app.chat import ChatService
from app.documents_service import MAX_FOLDER_FILE_BYTES, MAX_FOLDER_FILES, DocumentsService
from app.ui.blocks import clear_layout
from app.ui.markdown import monospace

FILE_FILTER = ("Documents (*.txt *.md *.markdown *.rst *.pdf *.py *.js *.ts *.c *.h *.cpp *.rs *.go *.java *.json "
               "*.yaml *.yml *.toml *.csv *.html *.sh *.sql);;All files (*)")


def file_icon():
    from app.ui.blocks import theme_colours
    from app.ui.icons import icon

    return icon("file", theme_colours().muted, 16)


class DocumentStrip(QWidget):
    """The documents attached to the current chat, as chips with a remove button."""

    def __init__(self, chat: ChatService, docs: DocumentsService) -> None:
        super().__init__()
        self.chat, self.docs = chat, docs
        self.setObjectName("documentStrip")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(24, 6, 24, 0)
        outer.setSpacing(4)
        self.lay = QHBoxLayout()
        self.lay.setSpacing(6)
        from app.ui.progress import ProgressLine

        self.progress = ProgressLine()  # a file being indexed (minutes for a long PDF)
        self._indexing: dict[str, tuple[int, int]] = {}
        outer.addLayout(self.lay)
        outer.addWidget(self.progress)
        chat.current_changed.connect(lambda _: self.refresh())
        docs.library_changed.connect(self.refresh)
        docs.indexing.connect(self._indexing_changed)
        self.refresh()

    def _indexing_changed(self, name: str, done: int, total: int) -> None:
        if total == 0 or (total > 0 and done >= total):
            self._indexing.pop(name, None)
        else:
            self._indexing[name] = (done, total)
        if not self._indexing:
            self.progress.finish()
        else:
            first, (d, t) = next(iter(self._indexing.items()))
            more = len(self._indexing) - 1
            tail = f" (and {more} more file{'s' if more > 1 else ''})" if more else ""
            if t < 0:
                if self.progress.isHidden() or not self.progress.label.text().startswith(f"Reading {first}"):
                    self.progress.start(f"Reading {first}{tail}…")
            else:
                self.progress.set_progress(f"Indexing {first}: {d:,} of {t:,} passages{tail}", d, t)
        self.setVisible(bool(self.docs.attached(self.chat.current)) or bool(self._indexing))

    def refresh(self) -> None:
        clear_layout(self.lay)
        attached = self.docs.attached(self.chat.current)
        self.lay.addStretch(1)
        label = QLabel("Attached:")
        label.setObjectName("statsLabel")
        self.lay.addWidget(label)
        for d in attached:
            chip = QPushButton(f"{d.title}   ×")
            chip.setIcon(file_icon())
            chip.setObjectName("chip")
            chip.setToolTip(f"{d.path}\n{d.chars:,} characters. Click to detach it from this chat.")
            chip.clicked.connect(lambda _=False, i=d.id: self._detach(i))
            self.lay.addWidget(chip)
        self.lay.addStretch(1)
        self.setVisible(bool(attached) or bool(self._indexing))

    def _detach(self, doc_id: int) -> None:
        if self.chat.current is not None:  # a chip shows a document of the open chat
            self.docs.detach(self.chat.current, doc_id)


class LibraryDialog(QDialog):
    """Every document in the library; tick the ones this chat uses."""

    def __init__(self, chat: ChatService, docs: DocumentsService, run: Callable, parent=None) -> None:
        super().__init__(parent)
        self.chat, self.docs, self.run = chat, docs, run
        self.setWindowTitle("Hearth — document library")
        self.resize(560, 420)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(18, 16, 18, 14)
        intro = QLabel("Documents stay on this computer. Ticked ones are attached to this chat; any document "
                       "can be attached to many chats.")
        intro.setWordWrap(True)
        intro.setObjectName("settingsMessage")
        self.list = QListWidget()
        self.list.itemChanged.connect(self._ticked)
        row = QHBoxLayout()
        add = QPushButton("Add files…")
        add.setObjectName("primaryButton")
        add.clicked.connect(self.add_files)
        self.add_folder_button = QPushButton("Add folder…")
        self.add_folder_button.setToolTip(
            f"Add every text, Markdown, code and PDF file in a folder and its subfolders (at most "
            f"{MAX_FOLDER_FILES}; hidden files and files over {MAX_FOLDER_FILE_BYTES // 1_000_000} MB are skipped)")
        self.add_folder_button.clicked.connect(self.add_folder)
        remove = QPushButton("Remove from library")
        remove.clicked.connect(self._remove)
        row.addWidget(add)
        row.addWidget(self.add_folder_button)
        row.addWidget(remove)
        row.addStretch(1)
        done = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        done.rejected.connect(self.accept)
        row.addWidget(done)
        lay.addWidget(intro)
        lay.addWidget(self.list, 1)
        self.status = QLabel("")  # what the last folder added, and what it skipped and why
        self.status.setObjectName("settingsMessage")
        self.status.setWordWrap(True)
        self.status.hide()
        lay.addWidget(self.status)
        lay.addLayout(row)
        docs.library_changed.connect(self.refresh)
        docs.folder_added.connect(self._folder_added)
        self.refresh()

    def refresh(self) -> None:
        attached = set(self.chat.current.options.get("documents") or []) if self.chat.current else set()
        self.list.blockSignals(True)
        self.list.clear()
        for d in self.docs.library.documents():
            item = QListWidgetItem(f"{d.title}   ·   {d.chars:,} characters" + (f" · {d.pages} pages" if d.pages > 1 else ""))
            item.setData(Qt.ItemDataRole.UserRole, d.id)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked if d.id in attached else Qt.CheckState.Unchecked)
            self.list.addItem(item)
        self.list.blockSignals(False)

    def _ticked(self, item: QListWidgetItem) -> None:
        c = self.chat.current_or_new()
        doc_id = item.data(Qt.ItemDataRole.UserRole)
        if item.checkState() == Qt.CheckState.Checked:
            self.docs.attach(c, doc_id)
        else:
            self.docs.detach(c, doc_id)

    def _remove(self) -> None:
        item = self.list.currentItem()
        if item is not None:
            self.docs.delete(item.data(Qt.ItemDataRole.UserRole))

    def add_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Add documents", "", FILE_FILTER)
        if self.chat.current is None and paths:
            self.chat.new_conversation()
        for p in paths:
            self.run(self.docs.add(p, self.chat.current))


    def add_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder of documents")
        if folder:
            self.add_folder_path(folder)

    def add_folder_path(self, folder: str) -> None:
        """Add every supported file in ``folder`` (what "Add folder…" does once one is picked)."""
        if self.chat.current is None:
            self.chat.new_conversation()
        self.status.setText(f"Adding the documents in “{Path(folder).name or folder}”…")
        self.status.show()
        self.run(self.docs.add_folder(folder, self.chat.current))

    def _folder_added(self, summary: str) -> None:
        self.status.setText(summary)
        self.status.show()


class PassageDialog(QDialog):
    """The passage a citation points at, with where it comes from."""

    def __init__(self, citation: dict, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("passage")
        self.setWindowTitle(f"Hearth — {citation.get('title', 'source')}")
        self.resize(560, 380)
        lay = QVBoxLayout(self)
        where = citation.get("title", "")
        if citation.get("page"):
            where += f", page {citation['page']}"
        if citation.get("whole"):
            where += " (the whole document was in the prompt)"
        elif citation.get("start") is not None:
            where += f", from character {citation['start']:,}"
        self.where = QLabel(where)
        self.where.setObjectName("modelName")
        self.text = QPlainTextEdit(citation.get("text", ""))
        self.text.setReadOnly(True)
        self.text.setFont(monospace())
        lay.addWidget(self.where)
        lay.addWidget(self.text, 1)
        close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        close.rejected.connect(self.accept)
        lay.addWidget(close)


