"""The chat page: conversation sidebar, header with model picker, messages, composer."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QFrame, QSizePolicy, QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFormLayout, QHBoxLayout, QInputDialog, QLabel,
    QLineEdit, QListView, QMenu, QPlainTextEdit, QPushButton, QSpinBox, QSplitter, QVBoxLayout, QWidget,
)

from app.chat import ChatService
from app.conversations import Conversation, Sampling
from app.qt_models import KeyRole
from app.ui.blocks import ElidedLabel
from app.ui.message_view import MessageView
from app.ui.tool_approval import ask_user

SERVER_DEFAULT = "Default model"


class ConversationSidebar(QWidget):
    def __init__(self, chat: ChatService) -> None:
        super().__init__()
        self.chat = chat
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
        self.list = QListView()
        self.list.setObjectName("conversationList")
        self.list.setModel(chat.conversations)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu)
        self.list.clicked.connect(self._clicked)
        self.list.setUniformItemSizes(True)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.setMinimumWidth(220)
        self.empty = QLabel("No chats yet.\nPress New chat (Ctrl+N),\nor just type below.")
        self.empty.setObjectName("statsLabel")
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        lay.addWidget(self.new_button)
        lay.addWidget(self.search)
        lay.addWidget(self.empty)
        lay.addWidget(self.list, 1)
        chat.current_changed.connect(self._follow_current)
        chat.conversations.modelReset.connect(lambda: self._follow_current(chat.current))

    def _clicked(self, index: QModelIndex) -> None:
        self.chat.select(index.data(KeyRole))

    def _follow_current(self, c: Conversation | None) -> None:
        searching = bool(self.search.text().strip())
        self.empty.setText("No chat matches." if searching else "No chats yet.\nPress New chat (Ctrl+N),\nor just type below.")
        self.empty.setVisible(self.chat.conversations.rowCount() == 0)
        row = self.chat.conversations.row_of(c.id) if c else None
        if row is None:
            self.list.clearSelection()
        else:
            self.list.setCurrentIndex(self.chat.conversations.index(row))

    def _menu(self, pos) -> None:
        index = self.list.indexAt(pos)
        if not index.isValid():
            return
        cid = index.data(KeyRole)
        menu = QMenu(self)
        menu.addAction("Rename…", lambda: self.rename(cid))
        menu.addAction("Delete", lambda: self.chat.delete(cid))
        menu.exec(self.list.viewport().mapToGlobal(pos))

    def rename(self, cid: int) -> None:
        c = self.chat.store.get(cid)
        if c is None:
            return
        title, ok = QInputDialog.getText(self, "Rename chat", "Title:", text=c.title)
        if ok:
            self.chat.rename(cid, title)


class ConversationSettingsDialog(QDialog):
    """System prompt and sampling of one conversation."""

    def __init__(self, c: Conversation, parent=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Hearth — chat settings")
        form = QFormLayout(self)
        self.system = QPlainTextEdit(c.system_prompt)
        self.system.setPlaceholderText("For example: You are a concise assistant.")
        self.temperature = QDoubleSpinBox(minimum=0.0, maximum=2.0, singleStep=0.1, value=c.sampling.temperature)
        self.top_p = QDoubleSpinBox(minimum=0.0, maximum=1.0, singleStep=0.05, value=c.sampling.top_p)
        self.max_tokens = QSpinBox(minimum=1, maximum=32768, value=c.sampling.max_tokens)
        self.seed = QSpinBox(minimum=-1, maximum=2**31 - 1, value=-1 if c.sampling.seed is None else c.sampling.seed)
        self.seed.setSpecialValueText("random")
        form.addRow("System prompt", self.system)
        form.addRow("Temperature", self.temperature)
        form.addRow("Top p", self.top_p)
        form.addRow("Max answer tokens", self.max_tokens)
        form.addRow("Seed", self.seed)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)

    def sampling(self) -> Sampling:
        seed = self.seed.value()
        return Sampling(self.temperature.value(), self.top_p.value(), self.max_tokens.value(),
                        None if seed < 0 else seed)


class ChatPage(QWidget):

    def __init__(self, chat: ChatService, documents=None, run=None) -> None:
        super().__init__()
        self.chat, self.documents, self.run = chat, documents, run
        self.sidebar = ConversationSidebar(chat)
        right = QWidget()
        right.setObjectName("chatPane")
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.setSpacing(0)
        header = QWidget()
        header.setObjectName("chatHeader")
        hl = QHBoxLayout(header)
        hl.setContentsMargins(20, 10, 14, 10)
        hl.setSpacing(8)
        self.title = ElidedLabel("New chat")
        self.title.setObjectName("chatTitle")
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # long titles are cut
        self.model_picker = QComboBox()
        self.model_picker.setMinimumWidth(180)
        self.model_picker.setMaximumWidth(300)
        self.model_picker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model_picker.setMinimumContentsLength(16)
        self.model_picker.setPlaceholderText("No models: start the server")
        self.model_picker.setToolTip("The model that answers in this chat")
        self.model_picker.activated.connect(self._model_picked)
        self.settings_button = QPushButton("")
        self.settings_button.setObjectName("iconButton")
        self.settings_button.setToolTip("Chat settings: system prompt and sampling")
        self.settings_button.clicked.connect(self.open_settings)
        self.tools_button = QPushButton("Tools")
        self.tools_button.setObjectName("smallButton")
        self.tools_button.setCheckable(True)
        self.tools_button.setChecked(True)
        self.tools_button.setToolTip("Offer the tools of your MCP servers to the model in this chat")
        self.tools_button.toggled.connect(self._tools_toggled)
        self.badges = QHBoxLayout()
        self.badges.setSpacing(4)
        self.ctx_spin = QSpinBox(minimum=0, maximum=1 << 20, singleStep=1024)
        self.ctx_spin.setSpecialValueText("default")
        self.ctx_spin.setSuffix(" tokens")
        self.ctx_spin.setFixedWidth(110)
        self.ctx_spin.setToolTip("This chat's context length (the model is loaded at it); the badge says "
                                 "whether it fits this computer")
        self.ctx_spin.editingFinished.connect(self._ctx_changed)
        self.fit_label = QLabel()
        self.fit_label.setObjectName("fitBadge")
        self.fit_label.hide()
        hl.addWidget(self.title, 1)
        hl.addWidget(self.model_picker)
        hl.addLayout(self.badges)
        hl.addWidget(QLabel("Context"))
        hl.addWidget(self.ctx_spin)
        hl.addWidget(self.fit_label)
        hl.addWidget(self.settings_button)
        self.view = MessageView(chat.messages)
        self.view.edit_submitted.connect(chat.edit_and_resend)
        self.view.regenerate_requested.connect(chat.regenerate)
        composer = QWidget()
        composer.setObjectName("composer")
        outer = QHBoxLayout(composer)
        outer.setContentsMargins(24, 8, 24, 16)
        box = QFrame()
        box.setObjectName("composerBox")
        box.setMaximumWidth(900)
        outer.addStretch(1)
        outer.addWidget(box, 20)
        outer.addStretch(1)
        bl = QVBoxLayout(box)
        bl.setContentsMargins(12, 8, 10, 8)
        bl.setSpacing(4)
        cl = QHBoxLayout()
        self.input = QPlainTextEdit()
        self.input.setObjectName("messageInput")
        self.input.setPlaceholderText("Message the model…   Ctrl+Enter sends · Esc stops")
        self.input.setFixedHeight(60)
        bl.addWidget(self.input)
        bl.addLayout(cl)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("primaryButton")
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(chat.stop)
        self.stop_button.hide()
        self.attach_button = QPushButton("")
        self.attach_button.setToolTip("Attach documents to this chat (text, Markdown, code, PDF) or pick from the library")
        self.attach_button.clicked.connect(self.open_library)
        self.attach_button.setVisible(documents is not None)
        self.attach_button.setObjectName("iconButton")
        self.hint = QLabel()
        self.hint.setObjectName("statsLabel")
        cl.addWidget(self.attach_button)
        cl.addWidget(self.tools_button)
        cl.addWidget(self.hint, 1)
        cl.addWidget(self.send_button)
        cl.addWidget(self.stop_button)
        for seq in ("Ctrl+Return", "Ctrl+Enter"):
            QShortcut(QKeySequence(seq), self.input, activated=self.send)
        # window-wide: new chat, search, stop, back to the composer
        QShortcut(QKeySequence("Ctrl+N"), self, activated=self.new_chat)
        QShortcut(QKeySequence("Ctrl+F"), self, activated=self.sidebar.search.setFocus)
        QShortcut(QKeySequence("Escape"), self, activated=lambda: self.chat.stop())
        QShortcut(QKeySequence("Ctrl+L"), self, activated=self.input.setFocus)
        self.approval = None  # the open tool-approval dialog, if any
        chat.ask = lambda call: ask_user(self, call, call.server)
        rl.addWidget(header)
        rl.addWidget(self.view, 1)
        if documents is not None:
            from app.ui.documents_ui import DocumentStrip

            self.document_strip = DocumentStrip(chat, documents)
            rl.addWidget(self.document_strip)
        rl.addWidget(composer)
        self.view.citation_clicked.connect(self.show_citation)
        self.passage = None
        split = QSplitter()
        split.addWidget(self.sidebar)
        split.addWidget(right)
        split.setStretchFactor(1, 1)
        split.setSizes([250, 770])
        split.setChildrenCollapsible(False)
        split.setHandleWidth(1)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(split)
        chat.busy_changed.connect(self._busy)
        chat.current_changed.connect(self._current)
        self._current(chat.current)

    def open_library(self) -> None:
        from app.ui.documents_ui import LibraryDialog

        if self.chat.current is None:
            self.chat.new_conversation()
        d = LibraryDialog(self.chat, self.documents, self.run, self)
        if not self.documents.library.documents():
            d.add_files()
        d.exec()

    def show_citation(self, citation: dict) -> None:
        from app.ui.documents_ui import PassageDialog

        self.passage = PassageDialog(citation, self)
        self.passage.open()

    def retheme(self, theme) -> None:
        from app.ui.icons import icon

        self.sidebar.new_button.setIcon(icon("plus", theme.accent_text))
        self.sidebar.search.setClearButtonEnabled(True)
        self.send_button.setIcon(icon("send", theme.accent_text))
        self.stop_button.setIcon(icon("stop", theme.text))
        self.attach_button.setIcon(icon("attach", theme.muted))
        self.tools_button.setIcon(icon("tools", theme.muted))
        self.settings_button.setIcon(icon("sliders", theme.muted))
        self.view.retheme(theme)

    def set_tool_count(self, n: int) -> None:
        self.tools_button.setText(f"Tools · {n}" if n else "Tools")
        self.tools_button.setToolTip(f"{n} tools of your MCP servers are offered to the model in this chat; "
                                     "click to turn them off here" if n else
                                     "No MCP server is running: add one in Settings → MCP servers")

    def new_chat(self) -> None:
        self.chat.new_conversation()
        self.input.setFocus()

    def _tools_toggled(self, on: bool) -> None:
        c = self.chat.current
        if c is not None and c.options.get("tools", True) != on:
            c.options["tools"] = on
            self.chat.store.update(c)

    def send(self) -> None:
        if self.chat.send(self.input.toPlainText()):
            self.input.clear()

    def bind_models(self, models, run) -> None:
        """The model service: loaded state, capabilities, loading on demand, fit verdicts."""
        self.models, self.run = models, run
        models.available_changed.connect(self.set_available)

    def set_available(self, rows: list[dict]) -> None:
        """Mark each model in the picker: loaded (with its memory) and its capabilities."""
        from app.models import capability_badges
        from app.qt_models import format_size

        self._available = {r["id"]: r for r in rows if r.get("id")}
        for i in range(self.model_picker.count()):
            mid = self.model_picker.itemData(i)
            r = self._available.get(mid)
            if not mid or r is None:
                continue
            bits = [mid]
            if r.get("loaded"):
                mem = (r.get("memory") or {}).get("rss_bytes")
                bits.append("● loaded" + (f" · {format_size(mem)}" if mem else ""))
            caps = capability_badges(r.get("capabilities"))
            if caps:
                bits.append(" · ".join(caps))
            self.model_picker.setItemText(i, "   ".join(bits))
        self._show_badges()
        self._ask_fit()

    def _show_badges(self) -> None:
        from app.models import capability_badges

        while self.badges.count():
            w = self.badges.takeAt(0).widget()
            if w is not None:
                w.deleteLater()
        mid = self.model_picker.currentData() or ""
        r = getattr(self, "_available", {}).get(mid) or next(
            (x for x in getattr(self, "_available", {}).values() if x.get("loaded")), None)
        for cap in capability_badges((r or {}).get("capabilities")):
            b = QLabel(cap)
            b.setObjectName("capBadge")
            self.badges.addWidget(b)

    def _ctx_changed(self) -> None:
        c = self.chat.current
        value = self.ctx_spin.value() or None
        if c is not None and c.options.get("ctx") != value:
            c.options["ctx"] = value
            self.chat.store.update(c)
        self._ask_fit()

    def _ask_fit(self) -> None:
        models = getattr(self, "models", None)
        c = self.chat.current
        mid = (c.model if c else "") or next((k for k, v in getattr(self, "_available", {}).items() if v.get("loaded")), "")
        if models is None or not mid:
            self.fit_label.hide()
            return

        async def ask():
            from app.models import fit_badge

            fit = await models.fit_at(mid, self.ctx_spin.value() or None)
            text, colour = fit_badge(fit)
            self.fit_label.setText(text)
            self.fit_label.setStyleSheet(f"background: {colour};" if colour else "")
            where = f" at {fit['ctx']:,} tokens of context" if fit and fit.get("ctx") else ""
            self.fit_label.setToolTip(f"The planner's verdict for {mid}{where} on this computer")
            self.fit_label.setVisible(bool(text))
        self.run(ask())

    def set_models(self, ids: list[str], default: str = "") -> None:
        self.model_picker.clear()
        self.model_picker.addItem(f"Default ({default})" if default else SERVER_DEFAULT, "")
        for mid in ids:
            self.model_picker.addItem(mid, mid)
        self._current(self.chat.current)
        if getattr(self, "_available", None):
            self.set_available(list(self._available.values()))
        if getattr(self, "models", None) is not None:
            self._ask_fit()

    def _model_picked(self, index: int) -> None:
        mid = self.model_picker.itemData(index) or ""
        self.chat.configure(model=mid)
        models = getattr(self, "models", None)
        row = getattr(self, "_available", {}).get(mid)
        if models is not None and mid and row is not None and not row.get("loaded"):
            self.run(models.load(mid))  # load on demand, while the user types
        self._show_badges()
        self._ask_fit()

    def _current(self, c: Conversation | None) -> None:
        self.title.setText(c.title if c else "New chat")
        self.tools_button.setChecked(bool(c.options.get("tools", True)) if c else True)
        self.ctx_spin.setValue(int(c.options.get("ctx") or 0) if c else 0)
        if getattr(self, "models", None) is not None:
            self._ask_fit()
        want = c.model if c else ""
        i = self.model_picker.findData(want)
        if i < 0 and want:
            self.model_picker.addItem(want, want)
            i = self.model_picker.count() - 1
        self.model_picker.setCurrentIndex(max(i, 0))

    def _busy(self, busy: bool) -> None:
        self.send_button.setVisible(not busy)
        self.stop_button.setVisible(busy)
        self.view.set_busy(busy)

    def open_settings(self) -> None:
        if self.chat.current is None:
            self.chat.new_conversation()
        d = ConversationSettingsDialog(self.chat.current, self)
        if d.exec() == QDialog.DialogCode.Accepted:
            self.chat.configure(system_prompt=d.system.toPlainText(), sampling=d.sampling())
