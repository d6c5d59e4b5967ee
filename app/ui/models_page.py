"""The model manager: the running model, installed models, the catalog with fit badges, downloads."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFileDialog, QFrame, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QMenu, QProgressBar, QPushButton, QTabWidget,
    QVBoxLayout, QWidget, QWidgetAction,
)

from app.api_types import CatalogModel, LocalModel, RunningModel
from app.background import Run
from app.model_settings import ModelSettings
from app.models import ACTIVE_STATES, ModelStoreService, fit_badge
from app.qt_models import format_size
from app.quantize_jobs import QuantizeService, describe, requantize_note, targets_for
from app.ui.row_list import RowList
from app.ui.style import badge_style
from app.ui.model_settings_dialog import ModelSettingsDialog


def _badge() -> QLabel:
    b = QLabel()
    b.setObjectName("fitBadge")
    b.setAlignment(Qt.AlignmentFlag.AlignCenter)
    b.hide()
    return b


def _set_badge(label: QLabel, fit: dict | None) -> None:
    text, colour = fit_badge(fit)
    label.setText(text)
    label.setStyleSheet(badge_style(colour))
    label.setVisible(bool(text))


class _Row(QFrame):
    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("modelRow")
        self.lay = QHBoxLayout(self)
        self.lay.setContentsMargins(10, 8, 10, 8)
        text = QVBoxLayout()
        text.setSpacing(2)
        self.name = QLabel()
        self.name.setObjectName("modelName")
        self.name.setWordWrap(True)  # a long name wraps in a narrow window instead of pushing the buttons out
        self.detail = QLabel()
        self.detail.setObjectName("modelDetail")
        self.detail.setWordWrap(True)
        text.addWidget(self.name)
        text.addWidget(self.detail)
        self.lay.addLayout(text, 1)
        self.badge = _badge()
        self.lay.addWidget(self.badge, 0, Qt.AlignmentFlag.AlignVCenter)  # its own height, not the row's


class CatalogRow(_Row):
    def __init__(self, entry: CatalogModel, pull: Callable[[str], None]) -> None:
        super().__init__()
        self.button = QPushButton("Download")
        self.button.clicked.connect(lambda: pull(self.entry.id))
        self.lay.addWidget(self.button)
        self.update_item(entry)

    def update_item(self, e: CatalogModel) -> None:
        self.entry = e
        self.name.setText(e.name)
        bits = [e.repo, e.parameters and f"{e.parameters} parameters",
                e.default_quant, format_size(e.size) if e.size else None, e.license,
                e.context_length and f"{e.context_length:,} context"]
        self.detail.setText(" · ".join(str(b) for b in bits if b))
        _set_badge(self.badge, e.fit)
        local = e.local or e.embedded
        self.button.setText("Installed" if local else "Download")
        self.button.setEnabled(not local)


class LocalRow(_Row):
    def __init__(self, model: LocalModel, delete: Callable[[str], None],
                 shrink: Callable[[str, str], None] | None = None,
                 settings: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self.settings_button = QPushButton("Settings")
        self.settings_button.setToolTip("How this model is loaded (context length, GPU layers, KV cache type) "
                                        "and the chat template that turns a conversation into its prompt")
        self.settings_button.clicked.connect(lambda: settings and settings(self.model.id))
        self.settings_button.setVisible(settings is not None)
        self.lay.addWidget(self.settings_button)
        self.shrink_button = QPushButton("Make smaller")
        self.shrink_menu = QMenu(self.shrink_button)  # filled per model: only the targets smaller than it
        self._shrink = shrink
        self.shrink_button.setMenu(self.shrink_menu)
        self.lay.addWidget(self.shrink_button)  # in the row before shown: never a window of its own
        self.shrink_button.setVisible(shrink is not None)
        self.button = QPushButton("Delete")
        self.button.clicked.connect(lambda: delete(self.model.id))
        self.lay.addWidget(self.button)
        self.update_item(model)

    def update_item(self, m: LocalModel) -> None:
        self.model = m
        self.name.setText(m.name)
        from app.models import capability_badges

        caps = capability_badges(m.capabilities)
        bits = [m.id if m.name != m.id else None, m.quant,
                f"{format_size(m.size)} on disk" if m.size else None, m.source,
                " + ".join(caps) if caps else None]
        self.detail.setText(" · ".join(str(b) for b in bits if b))
        # the file's path is long and says little at a glance: it is the row's tooltip
        self.name.setToolTip(m.path or "")
        self.detail.setToolTip(m.path or "")
        _set_badge(self.badge, m.fit)
        self.button.setEnabled(not m.embedded)
        self.button.setToolTip("Built into Hearth; it cannot be deleted." if m.embedded else "")
        from app.models import is_chat_model

        self._fill_shrink_menu(m, is_chat_model(m.capabilities))  # an encoder has no perplexity to keep
        self.settings_button.setEnabled(is_chat_model(m.capabilities))  # nor a chat template

    def _fill_shrink_menu(self, m: LocalModel, chat: bool) -> None:
        """The targets smaller than this file (bits per weight from its type), under a word on
        what quantizing an already quantized file costs."""
        self.shrink_menu.clear()
        targets = targets_for(m.quant)
        note = requantize_note(m.quant)
        if note:
            self.shrink_menu.addAction(_menu_note(self.shrink_menu, note))
            self.shrink_menu.addSeparator()
        for mix, what in targets:  # each a smaller file, its quality measured, beside the original
            action = self.shrink_menu.addAction(f"{mix} · {what}")
            action.triggered.connect(lambda _=False, mix=mix: self._shrink and self._shrink(self.model.id, mix))
        self.shrink_button.setEnabled(chat and bool(targets))
        if not targets:
            tip = f"This file ({m.quant}) is already as small as the sizes Hearth makes."
        else:
            tip = ("Make a smaller version of this model (importance-aware; its quality is measured against this "
                   "one). It appears here when done.")
        self.shrink_button.setToolTip(tip + (f"\n\n{note}" if note and targets else ""))


def _menu_note(menu: QMenu, text: str) -> QWidgetAction:
    """A paragraph at the top of a menu: wrapped, muted, not an item to pick."""
    label = QLabel(text)
    label.setObjectName("menuNote")
    label.setWordWrap(True)
    label.setFixedWidth(420)
    label.setContentsMargins(10, 6, 10, 6)
    action = QWidgetAction(menu)
    action.setDefaultWidget(label)
    action.setEnabled(False)
    return action


class DownloadRow(QFrame):
    def __init__(self, d: dict, act: Callable[[str, str], None]) -> None:
        super().__init__()
        self.setObjectName("modelRow")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 8, 10, 8)
        top = QHBoxLayout()
        self.name = QLabel()
        self.name.setObjectName("modelName")
        self.state = QLabel()
        self.state.setObjectName("modelDetail")
        top.addWidget(self.name, 1)
        top.addWidget(self.state)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        self.bar.setTextVisible(False)
        self.bar.setFixedHeight(8)
        buttons = QHBoxLayout()
        self.pause = QPushButton("Pause")
        self.resume = QPushButton("Resume")
        self.cancel = QPushButton("Cancel")
        for b, action in ((self.pause, "pause"), (self.resume, "resume"), (self.cancel, "cancel")):
            b.clicked.connect(lambda _=False, a=action: act(self.d["id"], a))
            buttons.addWidget(b)
        buttons.addStretch(1)
        self.error = QLabel()
        self.error.setObjectName("errorLabel")
        self.error.setWordWrap(True)
        lay.addLayout(top)
        lay.addWidget(self.bar)
        lay.addWidget(self.error)
        lay.addLayout(buttons)
        self.update_item(d)

    def update_item(self, d: dict) -> None:
        self.d = d
        state = d.get("state", "")
        self.name.setText(d.get("model") or d.get("ref") or d.get("id", "?"))
        done, total = d.get("done_bytes") or 0, d.get("total_bytes")
        # a conversion has no measure of its progress: a busy bar
        self.bar.setRange(0, 0 if state == "converting" else 1000)
        bits = [state]
        if total:
            bits.append(f"{format_size(done) or '0 B'} of {format_size(total)}")
            self.bar.setValue(int(1000 * done / total))
        else:
            self.bar.setValue(1000 if state == "completed" else 0)
        if d.get("speed_bps"):
            bits.append(f"{format_size(d['speed_bps'])}/s")
        if d.get("eta_s"):
            bits.append(f"{d['eta_s']:.0f} s left")
        if state == "converting":
            bits = [f"converting the {str(d.get('convert') or '').upper()} checkpoint to GGUF (4-bit kept)"]
        self.state.setText(" · ".join(bits))
        self.error.setText(d.get("error") or "")
        self.error.setVisible(bool(d.get("error")))
        active = state in ACTIVE_STATES
        self.pause.setVisible(active)
        self.resume.setVisible(state in ("paused", "failed"))
        self.cancel.setVisible(active or state == "paused")


class ModelsPage(QWidget):
    def __init__(self, models: ModelStoreService, run: Run, quantize: QuantizeService | None = None,
                 settings: ModelSettings | None = None) -> None:
        super().__init__()
        self.models, self.run, self.quantize, self.settings = models, run, quantize, settings
        self.settings_dialog: ModelSettingsDialog | None = None  # the open one, if any
        self.confirmation = None  # the open delete question, if any
        lay = QVBoxLayout(self)
        lay.setContentsMargins(24, 20, 24, 16)
        lay.setSpacing(10)
        title = QLabel("Models")
        title.setObjectName("pageTitle")
        lay.addWidget(title)
        running = QGroupBox("Loaded models")
        running.setObjectName("section")
        outer = QVBoxLayout(running)
        rl = QHBoxLayout()
        self.running_label = QLabel("No model loaded")
        self.running_label.setObjectName("modelName")
        self.memory_label = QLabel()
        self.memory_label.setObjectName("modelDetail")
        self.memory_label.setWordWrap(True)
        self.unload_button = QPushButton("Unload all")
        self.unload_button.setToolTip("Free the models' memory; the next chat message loads its model again.")
        self.unload_button.clicked.connect(lambda: run(models.unload()))
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(lambda: run(models.refresh()))
        # in a short window the cards fold away (the tabs below need the room); the button shows them
        self.residents_button = QPushButton("Show each")
        self.residents_button.setCheckable(True)
        self.residents_button.setToolTip("Show or hide a card for each loaded model (memory, context, Pin, Unload)")
        self.residents_button.toggled.connect(self._fold_residents)
        self.residents_button.clicked.connect(self._choose_residents)  # a click, not a resize: kept
        self._residents_chosen: bool | None = None  # the user's choice, once made; else by the window's height
        rl.addWidget(self.running_label)
        rl.addWidget(self.memory_label, 1)
        rl.addWidget(self.residents_button)
        rl.addWidget(self.unload_button)
        rl.addWidget(self.refresh_button)
        from app.ui.resident_models import ResidentList

        self.residents = ResidentList(models, run)
        outer.addLayout(rl)
        outer.addWidget(self.residents)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self._installed(), "Installed")
        self.tabs.addTab(self._discover(), "Discover")
        from app.ui.hub_browser import HubBrowser

        self.hub = HubBrowser()  # Hugging Face, through the service's search
        self._search_task: asyncio.Task | None = None  # the search on its way, if any
        self.hub.search_requested.connect(self._search_hub)
        self.hub.cancel_requested.connect(self._cancel_search)
        self.hub.repo_selected.connect(self._hub_files)
        self.hub.download_requested.connect(self._pull)
        self.tabs.addTab(self.hub, "Hugging Face")
        self.downloads = RowList(models.downloads, lambda d: DownloadRow(d, self._act),
                                 "No downloads. Pick a model on the Discover tab.")
        self.tabs.addTab(self.downloads, "Downloads")
        lay.addWidget(running)
        lay.addWidget(self.tabs, 1)
        models.running_changed.connect(self._running)
        models.downloads.rowsInserted.connect(lambda *_: self.tabs.setCurrentWidget(self.downloads))
        self._running(models.running)

    def _installed(self) -> QWidget:
        w = QWidget()
        lay = QVBoxLayout(w)
        row = QHBoxLayout()
        self.import_button = QPushButton("Import a .gguf file…")
        self.import_button.clicked.connect(self.choose_import)
        self.job_label = QLabel()  # a smaller version being made: its step and progress
        self.job_label.setObjectName("modelDetail")
        self.job_label.setWordWrap(True)
        self.job_stop = QPushButton("Stop")
        self.job_stop.setToolTip("Stop making it; asking for the same size later resumes from the last finished step.")
        self.job_stop.clicked.connect(lambda: self.quantize and self.run(self.quantize.stop()))
        self.job_label.hide()
        self.job_stop.hide()
        row.addWidget(self.job_label, 1)
        row.addWidget(self.job_stop)
        row.addStretch(0 if self.quantize else 1)
        row.addWidget(self.import_button)
        shrink = self._shrink if self.quantize is not None else None
        settings = self.show_settings if self.settings is not None else None
        if self.quantize is not None:
            self.quantize.changed.connect(self._job)
        self.local_list = RowList(self.models.local, lambda m: LocalRow(m, self._delete, shrink, settings),
                                  "No models yet. Download one on the Discover tab, or import a .gguf file.")
        lay.addLayout(row)
        lay.addWidget(self.local_list, 1)
        return w

    def _discover(self) -> QWidget:
        w = QWidget()
        lay = QVBoxLayout(w)
        row = QHBoxLayout()
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search the catalog: name, family, quantization, license")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self.models.catalog.set_query)
        self.pull_ref = QLineEdit()
        self.pull_ref.setPlaceholderText("or a Hugging Face reference: owner/repo:Q4_K_M")
        self.pull_button = QPushButton("Download")
        self.pull_button.setObjectName("primaryButton")
        self.pull_button.clicked.connect(self._pull_ref)
        row.addWidget(self.search, 2)
        row.addWidget(self.pull_ref, 2)
        row.addWidget(self.pull_button)
        self.catalog_list = RowList(self.models.catalog, lambda e: CatalogRow(e, self._pull),
                                    "The catalog appears here when the service is running.", self._no_match)
        lay.addLayout(row)
        lay.addWidget(self.catalog_list, 1)
        return w

    def _no_match(self) -> str:
        """A search that finds nothing says so (the catalog itself is there)."""
        q = self.search.text().strip()
        if not q or not self.models.catalog.has_entries():
            return ""
        return (f"No model in the catalog matches “{q}”. Try a family (llama, qwen, gemma), a size, or a "
                "Hugging Face reference (owner/repo:Q4_K_M) in the field beside it.")

    def _search_hub(self, query: str) -> None:
        self._cancel_search()
        self.hub.show_searching(query)

        async def search():
            self.models.hub_problem = None
            hits = await self.models.search_hub(query)
            self.hub.show_results(query, hits, self.models.hub_problem)
        self._search_task = self.run(search())

    def _cancel_search(self) -> None:
        """Stop waiting for a search on its way (the Cancel beside Search, or a new search)."""
        task, self._search_task = self._search_task, None
        if task is not None and not task.done():
            task.cancel()
            self.hub.show_cancelled()

    def _hub_files(self, repo: str) -> None:
        async def files():
            self.hub.show_files(repo, await self.models.hub_files(repo))
        self.run(files())

        async def card():
            self.hub.show_card(repo, await self.models.hub_card(repo))
        self.run(card())

    def _pull(self, ref: str) -> None:
        self.run(self.models.pull(ref))

    def _pull_ref(self) -> None:
        ref = self.pull_ref.text().strip()
        if ref:
            self.pull_ref.clear()
            self._pull(ref)

    def _act(self, download_id: str, action: str) -> None:
        self.run(self.models.act(download_id, action))

    def _delete(self, model_id: str) -> None:
        """Delete a model after a question that says what goes: a downloaded file is removed, an
        imported one is only forgotten (its file stays where it is)."""
        from app.ui.confirm import confirm

        row = self.models.local.row_of(model_id)
        m = self.models.local.item(row) if row is not None else None
        if m is None:
            return
        if m.source == "imported":
            detail, action = f"Hearth forgets it; the file stays at {m.path}.", "Remove from list"
        else:
            size = f" ({format_size(m.size)})" if m.size else ""
            detail, action = f"Its file{size} is deleted from this computer. Downloading it again takes time.", \
                "Delete model"
        confirm(self, f"Delete {m.name}?", detail, action, lambda: self.run(self.models.delete(model_id)))

    def show_settings(self, model_id: str) -> None:
        """The model's settings (load settings, chat template) in a dialog of its own, read from
        the service."""
        if self.settings is None:
            return
        row = self.models.local.row_of(model_id)
        m = self.models.local.item(row) if row is not None else None
        if self.settings_dialog is not None:
            self.settings_dialog.close()
        self.settings_dialog = ModelSettingsDialog(self.settings, model_id, m.name if m is not None else model_id,
                                              self.run, self)
        self.settings_dialog.show()
        self.run(self.settings_dialog.refresh())

    def _shrink(self, model_id: str, to: str) -> None:
        if self.quantize is not None:
            self.run(self.quantize.start(model_id, to))

    def _job(self, job: dict | None) -> None:
        self.job_label.setVisible(job is not None)
        self.job_stop.setVisible(job is not None and job.get("state") == "running")
        if job is not None:
            self.job_label.setText(describe(job))

    def choose_import(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Import a model", "", "GGUF models (*.gguf)")
        if path:
            self.run(self.models.import_file(path))

    #: below this height the loaded models' cards fold away unless shown on purpose
    FOLD_HEIGHT = 640

    def _choose_residents(self, shown: bool) -> None:
        self._residents_chosen = shown

    def _fold_residents(self, shown: bool) -> None:
        self.residents.setVisible(shown)
        self.residents_button.setText("Hide each" if shown else "Show each")

    def _place_residents(self) -> None:
        shown = self._residents_chosen if self._residents_chosen is not None else self.height() >= self.FOLD_HEIGHT
        self.residents_button.blockSignals(True)
        self.residents_button.setChecked(shown)
        self.residents_button.blockSignals(False)
        self._fold_residents(shown)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._place_residents()

    def _running(self, running: RunningModel | None) -> None:
        self.residents_button.setVisible(running is not None)
        if running is None:
            self.running_label.setText("No model loaded")
            self.memory_label.setText("The first chat message loads its model; picking one in the chat loads it too.")
            self.unload_button.setEnabled(False)
            return
        residents = self.models.residents
        self.running_label.setText(running.id if len(residents) <= 1 else f"{len(residents)} models")
        bits = []
        total = sum(m.get("memory_bytes") or 0 for m in residents) or running.memory_bytes
        if total:
            bits.append(f"{format_size(total)} in memory")
        if len(residents) <= 1:
            if running.n_ctx:
                bits.append(f"{running.n_ctx:,} tokens of context")
            if running.pid:
                bits.append(f"process {running.pid}")
        else:
            bits[-1:] = [bits[-1] + " together"] if bits else []
        self.memory_label.setText(" · ".join(bits))
        self.unload_button.setEnabled(True)
