"""The chat page: the chat list, the header (model, context, settings), the messages, the composer
(with the files dropped on it)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from PySide6.QtCore import QSize, QTimer
from PySide6.QtGui import QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QDialog, QFrame, QHBoxLayout, QPushButton, QSizePolicy, QSplitter, QVBoxLayout, QWidget,
)

from app import background
from app.background import Run
from app.chat import ChatService
from app.api_types import AvailableModel
from app.conversations import Conversation, Sampling
from app.ui.blocks import ElidedLabel, clear_layout
from app.ui.chat_header import SERVER_DEFAULT, ChatHeader  # noqa: F401 - SERVER_DEFAULT: the picker's words
from app.ui.chat_settings import ChatSettingsPanel, ConversationSettingsDialog
from app.ui.composer import ComposerInput
from app.ui.context_meter import ContextMeter
from app.ui.conversation_sidebar import ConversationSidebar
from app.ui.message_view import MessageView
from app.ui.tool_approval import ToolApprovalDialog, ask_user

if TYPE_CHECKING:
    from app.attachments import Attachment
    from app.documents_service import DocumentsService
    from app.models import ModelStoreService
    from app.presets import PresetStore
    from app.ui.documents_ui import DocumentStrip, PassageDialog


HINT = "Enter sends · Shift+Enter new line"


#: the conversation's width below which the chat list folds away for the settings panel
CONVERSATION_MIN_WIDTH = 460
#: a chat page narrower than this folds its chat list away (the list button brings it back)
LIST_FOLD_WIDTH = 820

class ChatPage(QWidget):

    def __init__(self, chat: ChatService, documents: DocumentsService | None = None, run: Run | None = None, *,
                 presets: PresetStore | None = None, models: ModelStoreService | None = None) -> None:
        super().__init__()
        self.chat, self.documents, self.run = chat, documents, run
        self.models: ModelStoreService | None = None  #: bound at the end (``bind_models``)
        self.presets = presets  #: system-prompt presets, offered in the chat's settings
        self._loads: set[str] = set()  #: the models being loaded
        self.sidebar = ConversationSidebar(chat, run)
        right = QWidget()
        right.setObjectName("chatPane")
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.setSpacing(0)
        self.header = ChatHeader()
        self.title, self.model_picker = self.header.title, self.header.model_picker
        self.ctx_spin, self.fit_label, self.settings_button = (self.header.ctx_spin, self.header.fit_label,
                                                              self.header.settings_button)
        self.header.model_picked.connect(self._model_picked)
        self.header.ctx_changed.connect(self._ctx_changed)
        self.header.settings_requested.connect(self.toggle_settings)
        self.header.list_requested.connect(self._list_clicked)
        #: the user's choice of showing the chat list, once made; else it follows the width
        self._list_chosen: bool | None = None
        self.view = MessageView(chat.messages)
        self.sidebar.match_opened.connect(self.view.bring_into_sight)  # a search hit opens at its message
        self.view.edit_submitted.connect(chat.edit_and_resend)
        self.view.regenerate_requested.connect(chat.regenerate)
        self.view.variant_requested.connect(chat.switch_variant)
        self.composer = composer = QWidget()
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
        self.input = ComposerInput()
        self.input.setPlaceholderText("Message the model…")
        self.input.setAccessibleName("Message")
        self.input.setFixedHeight(60)
        self.input.submitted.connect(self.send)

        def show_focus(on: bool) -> None:
            box.setProperty("focused", on)
            box.style().unpolish(box)
            box.style().polish(box)
        self.input.focus_changed.connect(show_focus)
        self.input.drag_active.connect(lambda on: show_focus(on or self.input.hasFocus()))
        self.input.files_dropped.connect(self.attach_files)
        self.pending: list[Attachment] = []  # files dropped on the composer, sent with the next message
        self.attachments = QWidget()
        self.attachments.setObjectName("attachmentStrip")
        self._attach_row = QHBoxLayout(self.attachments)
        self._attach_row.setContentsMargins(0, 0, 0, 0)
        self._attach_row.setSpacing(6)
        self.attachments.hide()
        from app.ui.progress import ProgressLine

        self.load_progress = ProgressLine()  # a model loading: a busy bar and the seconds so far
        bl.addWidget(self.load_progress)
        bl.addWidget(self.attachments)
        bl.addWidget(self.input)
        bl.addLayout(cl)
        self.send_button = QPushButton("Send")
        self.send_button.setObjectName("primaryButton")
        self.send_button.setToolTip("Send (Enter)")
        self.send_button.clicked.connect(self.send)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop the answer (Esc)")
        self.stop_button.clicked.connect(chat.stop)
        self.stop_button.hide()
        self.attach_button = QPushButton("")
        self.attach_button.setToolTip("Attach documents to this chat (text, Markdown, code, PDF) or pick from the library")
        self.attach_button.setAccessibleName("Attach documents")
        self.attach_button.clicked.connect(self.open_library)
        self.attach_button.setVisible(documents is not None)
        self.media_button = QPushButton("Image")
        self.media_button.setObjectName("smallButton")
        self.media_button.setToolTip("Attach images or a sound clip (WAV) to the next message, for a model that reads "
                                     "them; or drop them on the message box")
        self.media_button.setAccessibleName("Attach images or sound")
        self.media_button.clicked.connect(self.pick_media)
        self.attach_button.setObjectName("iconButton")
        self.tools_button = QPushButton("Tools")
        self.tools_button.setObjectName("smallButton")
        self.tools_button.setCheckable(True)
        self.tools_button.setChecked(True)
        self.tools_button.setToolTip("Offer the tools of your MCP servers to the model in this chat")
        self.tools_button.toggled.connect(self._tools_toggled)
        self.hint = ElidedLabel(HINT)
        self.hint.setObjectName("statsLabel")
        self.hint.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        cl.addWidget(self.attach_button)
        cl.addWidget(self.media_button)
        cl.addWidget(self.tools_button)
        cl.addWidget(self.hint, 1)
        self.meter = ContextMeter()
        cl.addWidget(self.meter)
        cl.addWidget(self.send_button)
        cl.addWidget(self.stop_button)
        # window-wide: new chat, search, stop, back to the composer
        QShortcut(QKeySequence("Ctrl+N"), self).activated.connect(self.new_chat)
        QShortcut(QKeySequence("Ctrl+F"), self).activated.connect(self._focus_search)
        QShortcut(QKeySequence("Escape"), self).activated.connect(lambda: self.chat.stop())
        QShortcut(QKeySequence("Ctrl+L"), self).activated.connect(self.input.setFocus)
        QShortcut(QKeySequence("Ctrl+R"), self).activated.connect(lambda: self.chat.regenerate())
        QShortcut(QKeySequence("Ctrl+Shift+C"), self).activated.connect(self.copy_last_answer)
        self.approval: ToolApprovalDialog | None = None  # the open tool-approval dialog, if any
        chat.ask = lambda call: ask_user(self, call, call.server, opened=self._approval_opened)
        rl.addWidget(self.header)
        from app.ui.suggestion_card import SuggestionCard

        self.suggestion_card = SuggestionCard()  # the first-run suggestion, above the messages
        self.suggestion_card.hide()
        card_row = QHBoxLayout()
        card_row.setContentsMargins(24, 12, 24, 0)
        card_row.addWidget(self.suggestion_card)
        rl.addLayout(card_row)
        rl.addWidget(self.view, 1)
        self.document_strip: DocumentStrip | None = None  # the chat's documents, where there is a library
        if documents is not None:
            from app.ui.documents_ui import DocumentStrip

            self.document_strip = DocumentStrip(chat, documents)
            rl.addWidget(self.document_strip)
        rl.addWidget(composer)
        self.view.citation_clicked.connect(self.show_citation)
        self.passage: PassageDialog | None = None
        #: the chat's settings beside the conversation, open until closed (the header's settings button)
        self.settings_panel = ChatSettingsPanel(chat.current or Conversation(0, "New chat"), presets)
        self.settings_panel.edited.connect(self._settings_edited)
        self.settings_panel.hide()
        self.split = QSplitter()
        self.split.addWidget(self.sidebar)
        self.split.addWidget(right)
        self.split.addWidget(self.settings_panel)
        self.split.setStretchFactor(1, 1)
        self.split.setSizes([250, 770, 0])
        self.split.setCollapsible(0, True)  # the chat list folds away (drag, or Ctrl+B)
        self.split.setCollapsible(1, False)
        self.split.setCollapsible(2, False)
        self.split.setHandleWidth(1)
        QShortcut(QKeySequence("Ctrl+B"), self).activated.connect(self._list_clicked)
        QShortcut(QKeySequence("Ctrl+,"), self).activated.connect(self.toggle_settings)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.split)
        self.setTabOrder(self.input, self.send_button)
        chat.busy_changed.connect(self._busy)
        chat.current_changed.connect(self._current)
        #: the service's count of the chat's next request: (what it depends on, tokens, messages left out)
        self._counted: tuple[tuple, int, int] | None = None
        self._counting: tuple | None = None  #: what the count on its way was asked for
        self._meter_timer = QTimer(self)  # typing and streaming ask often: the meter counts at most 5 times a second
        self._meter_timer.setSingleShot(True)
        self._meter_timer.setInterval(200)
        self._meter_timer.timeout.connect(self.update_meter)
        for sig in (chat.messages.modelReset, chat.messages.rowsInserted, chat.messages.rowsRemoved,
                    chat.messages.dataChanged, self.input.textChanged):
            sig.connect(lambda *_: self._meter_timer.start())
        self._current(chat.current)
        if models is not None:
            self.bind_models(models, run)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._place_list()
        side, middle, panel = self.split.sizes()
        if panel and side and middle < CONVERSATION_MIN_WIDTH:  # the window shrank with the settings open
            self.split.setSizes([0, middle + side, panel])
            self.sidebar.hide()
            self.header.list_button.setChecked(False)
        # the key hint steps aside in a narrow window (the meter and the buttons keep their room)
        self.hint.setVisible(self.input.width() > 560)

    def toggle_sidebar(self) -> None:
        """Fold the chat list away, or bring it back (the settings panel keeps its width)."""
        side, middle, panel = self.split.sizes()
        total = side + middle
        if side > 0:
            self.split.setSizes([0, total, panel])
            self.sidebar.hide()  # out of the Tab order too
        else:
            self.sidebar.show()
            self.split.setSizes([min(250, total // 3), total - min(250, total // 3), panel])
        self.header.list_button.setChecked(self.split.sizes()[0] > 0)

    def _list_clicked(self) -> None:
        """The list button or Ctrl+B: the choice is kept over resizes."""
        self.toggle_sidebar()
        self._list_chosen = self.split.sizes()[0] > 0

    def _place_list(self) -> None:
        """Without a choice of the user's, the chat list shows in a window wide enough for it and
        the conversation, and folds away in a narrower one."""
        side = self.split.sizes()[0]
        want = self._list_chosen if self._list_chosen is not None else self.width() >= LIST_FOLD_WIDTH
        if (side > 0) != want and self.width() > 0:
            self.toggle_sidebar()
        self.header.list_button.setChecked(self.split.sizes()[0] > 0)

    def toggle_settings(self) -> None:
        """Open the chat's settings beside the conversation (they stay open, following the open
        chat), or close them."""
        p = self.settings_panel
        if p.isVisible():
            p.apply_now()
            p.hide()
            self.header.settings_button.setChecked(False)
            return
        p.show_chat(self.chat.current_or_new())
        p.show()
        side, middle, _ = self.split.sizes()
        least = max(CONVERSATION_MIN_WIDTH, self.header.minimumWidth())  # the header's controls stay whole
        width = min(340, max(260, middle // 3))
        if middle - width < least:  # a small window: the chat list folds away for it
            middle, side = middle + side, 0
            self.sidebar.hide()
        width = max(self.settings_panel.minimumWidth(), min(width, middle - least))
        self.split.setSizes([side, max(middle - width, 200), width])
        self.header.settings_button.setChecked(True)
        self.header.list_button.setChecked(side > 0)
        p.system.setFocus()

    def _settings_edited(self, conversation_id: int, system_prompt: str, sampling: Sampling) -> None:
        self.chat.configure(system_prompt=system_prompt, sampling=sampling, conversation_id=conversation_id)
        self._meter_timer.start()  # the system prompt counts

    def _focus_search(self) -> None:
        if self.split.sizes()[0] == 0:
            self.toggle_sidebar()
        self.sidebar.search.setFocus()
        self.sidebar.search.selectAll()

    def open_library(self) -> None:
        from app.ui.documents_ui import LibraryDialog

        if self.documents is None or self.run is None:  # no library: the button is hidden
            return
        if self.chat.current is None:
            self.chat.new_conversation()
        d = LibraryDialog(self.chat, self.documents, self.run, self)
        if not self.documents.library.documents():
            d.add_files()
        d.exec()

    def _approval_opened(self, dialog: ToolApprovalDialog) -> None:
        self.approval = dialog  # the open question, for the window (and its tests) to find

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
        self.header.list_button.setIcon(icon("sidebar", theme.muted))
        self.view.retheme(theme)
        if self.document_strip is not None:
            self.document_strip.refresh()  # its chips' icons in the new colours

    def set_tool_count(self, n: int) -> None:
        self.tools_button.setText(f"Tools · {n}" if n else "Tools")
        self.tools_button.setToolTip(f"{n} tools of your MCP servers are offered to the model in this chat; "
                                     "click to turn them off here" if n else
                                     "No MCP server is running: add one in Settings → MCP servers")

    def copy_last_answer(self) -> bool:
        """The last answer's text on the clipboard, its Copy button saying so (Ctrl+Shift+C)."""
        msgs = self.chat.messages.items()
        row = next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].role == "assistant" and msgs[i].content), None)
        if row is None:
            return False
        QGuiApplication.clipboard().setText(msgs[row].content)
        self.view.widget_at(row).show_copied()
        return True

    def new_chat(self) -> None:
        self.chat.new_conversation()
        self.input.setFocus()

    def _tools_toggled(self, on: bool) -> None:
        c = self.chat.current
        if c is not None and c.options.get("tools", True) != on:
            self.chat.set_option("tools", on)

    def send(self) -> None:
        files = [a.to_meta() for a in self.pending]
        text = self.input.toPlainText()
        if files and not self._model_reads(files):
            return
        if self.chat.send(text, files) if files else self.chat.send(text):
            self.input.clear()
            self.pending = []
            self._show_attachments()

    def _model_reads(self, files: list[dict]) -> bool:
        """Whether the chat's model reads the attached images and clips; if not, say so (nothing
        is sent: the message and its attachments stay in the box)."""
        from app.attachments import needs
        from app.errors import UserError

        want = needs(files)
        mid = self.header.chat_model()
        caps = (self.header.row(mid) or {}).get("capabilities")
        if not want or caps is None:  # nothing to read, or the service has not said: it decides
            return True
        missing = sorted(want - set(caps))
        if not missing:
            return True
        what = {"vision": "images", "audio": "sound"}
        name = mid or "This model"
        title = (f"{name} reads text only." if not {"vision", "audio"} & set(caps)
                 else f"{name} does not read {' or '.join(what[m] for m in missing)}.")
        self.chat.error.emit(UserError(
            title, "The attached " + " and ".join(what[m] for m in missing) + " cannot be sent to it.",
            "Pick a model marked “" + "” or “".join(missing) + "” in the model list above, or remove the "
            "attachment (click its chip).", "attach"))
        return False

    def pick_media(self) -> None:
        """Choose images or sound clips for the next message."""
        from PySide6.QtWidgets import QFileDialog

        from app.attachments import AUDIO_TYPES, IMAGE_TYPES

        images = " ".join(f"*{s}" for s in IMAGE_TYPES)
        sounds = " ".join(f"*{s}" for s in AUDIO_TYPES)
        paths, _ = QFileDialog.getOpenFileNames(self, "Attach images or sound", "",
                                                f"Images and sound ({images} {sounds});;Images ({images});;"
                                                f"Sound ({sounds})")
        if paths:
            self.attach_files(paths)

    def attach_files(self, paths: list[str]) -> None:
        """Read dropped files off the event loop; each becomes a chip above the message box. A
        dropped folder is added to the chat's documents, as "Add folder…" does."""
        import asyncio
        import os

        from app.attachments import MAX_FILES, AttachmentError, read_attachment
        from app.errors import UserError

        async def read() -> None:
            for path in paths:
                if self.documents is not None and os.path.isdir(path):
                    # a folder goes to the chat's documents, file by file (``DocumentsService.add_folder``)
                    await self.documents.add_folder(path, self.chat.current_or_new())
                    continue
                if len(self.pending) >= MAX_FILES:
                    self.chat.error.emit(UserError("Too many files for one message.",
                                                   f"A message carries at most {MAX_FILES} files.",
                                                   "Send these first, or add the rest to the chat's documents.",
                                                   "attach"))
                    break
                try:
                    a = await asyncio.to_thread(read_attachment, path)
                except AttachmentError as e:
                    self.chat.error.emit(UserError("The file could not be attached.", str(e), "", "attach"))
                    continue
                self.pending = [p for p in self.pending if p.name != a.name] + [a]
                self._show_attachments()
        if self.run is not None:
            self.run(read())
        self.input.setFocus()

    def remove_attachment(self, name: str) -> None:
        self.pending = [a for a in self.pending if a.name != name]
        self._show_attachments()

    def _show_attachments(self) -> None:
        from app.qt_models import format_size
        from app.ui.documents_ui import file_icon
        from app.ui.thumbnails import thumbnail_icon

        clear_layout(self._attach_row)
        for a in self.pending:
            chip = QPushButton(f"{a.name} · {format_size(a.size)}   ×")
            chip.setObjectName("chip")
            if a.kind == "image":
                chip.setIcon(thumbnail_icon(a.data))
                chip.setIconSize(QSize(28, 28))
                chip.setToolTip("An image, sent with the message for a model that reads images. Click to remove it.")
            elif a.kind == "audio":
                chip.setIcon(file_icon())
                chip.setToolTip("A sound clip, sent with the message for a model that hears audio. Click to remove it.")
            else:
                chip.setIcon(file_icon())
                chip.setToolTip(f"{len(a.text):,} characters, sent with the message as context. Click to remove it.")
            chip.setAccessibleName(f"Attached {a.kind if a.kind != 'text' else 'file'} {a.name}; remove")
            chip.clicked.connect(lambda _=False, n=a.name: self.remove_attachment(n))
            self._attach_row.addWidget(chip)
        self._attach_row.addStretch(1)
        self.attachments.setVisible(bool(self.pending))
        self._meter_timer.start()

    def update_meter(self) -> None:
        """How full the chat's context is: its own context length, or the model's. The service
        counts the chat as its next request would send it (overflow policy included) once the
        chat's model is loaded and no answer is being written; until then, and for the message
        being written, an estimate."""
        from app.attachments import attachment_chars
        from app.context_use import context_use, counted_use

        c = self.chat.current
        row = self.header.row(self.header.chat_model()) or {}
        limit = (c.options.get("ctx") if c else None) or row.get("context_length")
        limit = int(limit) if limit else None
        draft = self.input.toPlainText()
        key = self._count_key()
        if self._counted is not None and self._counted[0] == key:
            self.meter.show_use(counted_use(self._counted[1], self._counted[2], draft, limit))
            return
        self.meter.show_use(context_use(self.chat.messages.items(), draft, limit, c.system_prompt if c else "",
                                        attachment_chars({"attachments": [a.to_meta() for a in self.pending]})))
        if c is not None and row.get("loaded") and not self.chat.busy and key != self._counting and _loop_running():
            self._counting = key
            background.start(self._count(key), "the context count", lambda _e: None)

    def _count_key(self) -> tuple:
        """What the service's count depends on (the message being written is estimated apart)."""
        c = self.chat.current
        items = self.chat.messages.items()
        return (c.id if c else None, self.header.chat_model(), c.sampling.context_overflow if c else "",
                c.system_prompt if c else "", c.options.get("ctx") if c else None, len(items),
                items[-1].id if items else 0, items[-1].meta.get("finish") if items else None,
                tuple(a.name for a in self.pending))

    async def _count(self, key: tuple) -> None:
        try:
            got = await self.chat.count_next([a.to_meta() for a in self.pending])
        finally:
            self._counting = None
        if key == self._count_key():
            self._counted = (key, int(got.get("prompt_tokens") or 0), int(got.get("dropped_messages") or 0))
            self.update_meter()

    def bind_models(self, models: ModelStoreService, run: Run | None) -> None:
        """The model service: loaded state, capabilities, loading on demand, fit verdicts."""
        self.models, self.run = models, run
        models.available_changed.connect(self.set_available)
        models.loading.connect(self._loading)

    def _loading(self, mid: str, on: bool) -> None:
        (self._loads.add if on else self._loads.discard)(mid)
        if self._loads:
            self.load_progress.start(f"Loading {', '.join(sorted(self._loads))} into memory…")
        else:
            self.load_progress.finish()

    def set_available(self, rows: list[AvailableModel]) -> None:
        """Mark each model in the picker: loaded (with its memory) and its capabilities."""
        self.header.set_available(rows)
        self._meter_timer.start()
        self._ask_fit()

    def set_models(self, ids: list[str], default: str = "") -> None:
        """The models this computer has; the picker offers the chat models among them."""
        c = self.chat.current
        self.header.set_models(ids, default, c.model if c else "")
        self._ask_fit()

    def _ctx_changed(self) -> None:
        self.chat.set_option("ctx", self.ctx_spin.value() or None)
        self._ask_fit()
        self._meter_timer.start()

    def _ask_fit(self) -> None:
        """The planner's verdict for the chat's model at the chat's context (none when the app
        cannot tell which model answers)."""
        mid = self.header.chat_model()
        if self.models is None or self.run is None or not mid:
            self.header.set_fit("", "", "")
            return
        ctx = self.ctx_spin.value() or None

        async def ask():
            from app.models import fit_badge

            fit = await self.models.fit_at(mid, ctx)
            if mid != self.header.chat_model():
                return  # the chat or its model changed while the planner answered
            text, colour = fit_badge(fit)
            where = f" at {fit['ctx']:,} tokens of context" if fit and fit.get("ctx") else ""
            self.header.set_fit(text, colour, f"The planner's verdict for {mid}{where} on this computer")
        self.run(ask())

    def _model_picked(self, mid: str) -> None:
        self.chat.configure(model=mid)
        row = self.header.row(mid)
        if self.models is not None and self.run is not None and mid and row is not None and not row.get("loaded"):
            self.run(self._load(self.models, mid))  # load on demand, while the user types
        self.header.show_badges()
        self._ask_fit()
        self._meter_timer.start()

    def use_model(self, mid: str) -> None:
        """Answer in this chat (a new one if none is open) with ``mid``, as if picked in the list."""
        if self.chat.current is None:
            self.chat.new_conversation()
        self.header.choose(mid)
        self._model_picked(mid)

    async def _load(self, models: ModelStoreService, mid: str) -> None:
        """Load the picked model; the line under the message box says so until it is ready."""
        self.hint.setText(f"Loading {mid}…")
        try:
            await models.load(mid)
        finally:
            self.hint.setText(HINT)

    def _current(self, c: Conversation | None) -> None:
        self.title.setText(c.title if c else "New chat")
        if self.settings_panel.isVisible() and c is not None:
            self.settings_panel.show_chat(c)
        self.tools_button.setChecked(bool(c.options.get("tools", True)) if c else True)
        self.ctx_spin.setValue(int(c.options.get("ctx") or 0) if c else 0)
        self.header.choose(c.model if c else "")
        if self.models is not None:
            self._ask_fit()
        self._meter_timer.start()

    def _busy(self, busy: bool) -> None:
        self.send_button.setVisible(not busy)
        self.stop_button.setVisible(busy)
        self.view.set_busy(busy)

    def open_settings(self) -> None:
        d = ConversationSettingsDialog(self.chat.current_or_new(), self, self.presets)
        if d.exec() == QDialog.DialogCode.Accepted:
            self.chat.configure(system_prompt=d.system.toPlainText(), sampling=d.sampling())


def _loop_running() -> bool:
    """Whether the app's event loop runs (a timer can fire while Qt alone handles events: at start,
    at shutdown): the service's count waits for the next change then."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
