"""The composition root: builds settings, the API client, the services and the windows, and wires
them together. Nothing else in the app creates a long-lived object; there are no singletons."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QApplication, QMessageBox, QWidget

from app.api_client import ApiClient
from runtime.api_key import load_key
from app.chat import ChatService
from app.conversations import ConversationStore
from app.errors import MODEL_PROBLEMS, SERVICE_PROBLEMS, SERVICE_UNREACHABLE, ApiProblem, UserError, explain
from app.service import DIED, FOREIGN, RUNNING, UNREACHABLE, ServiceController
from app.settings import AppSettings, SettingsStore
from app.tray import Tray, state_icon
from app.ui.chat_page import ChatPage
from app.ui.main_window import MainWindow
from app.ui.server_page import STATE_WORDS, ServerPage
from app.ui.settings_page import SettingsPage

if TYPE_CHECKING:
    from app.ui.models_page import ModelsPage
    from app.ui.style import Theme

log = logging.getLogger("hearth.app")


def autostart_setter() -> Callable[[bool], None] | None:
    """The platform's start-at-login switch, where this installation has one."""
    try:
        from app.autostart import set_enabled
    except ImportError:
        return None
    return set_enabled


def autostart_state() -> Callable[[], bool] | None:
    """Whether starting at login is on, as the platform says (None where there is no switch)."""
    try:
        from app.autostart import is_enabled
    except ImportError:
        return None
    return is_enabled


def connect_host(bind: str) -> str:
    """Where the app reaches a service bound to ``bind``."""
    return "127.0.0.1" if bind in ("0.0.0.0", "", "::") else bind


class HearthApp(QObject):
    """One running desktop app: its objects, their wiring, start and shutdown."""

    def __init__(self, qapp: QApplication, data_dir: Path, *, port: int | None = None,
                 start_on_login: Callable[[bool], None] | None = None,
                 start_on_login_state: Callable[[], bool] | None = None, poll_s: float = 1.0,
                 tray_available: bool | None = None) -> None:
        super().__init__()
        self.qapp = qapp
        qapp.setQuitOnLastWindowClosed(False)  # the tray keeps running; quitting is explicit
        self.data_dir = data_dir
        self.settings_store = SettingsStore(data_dir / "app-settings.json")
        self.settings = self.settings_store.load()
        if port is not None:
            self.settings.port = port
        if start_on_login_state is not None:
            try:
                self.settings.start_on_login = bool(start_on_login_state())
            except OSError as e:
                log.warning("cannot read the start-at-login state: %s", e)
        self.client = ApiClient(f"http://{connect_host(self.settings.host)}:{self.settings.port}",
                                api_key=load_key(data_dir))
        self.service = ServiceController(self.client, self.settings, poll_s=poll_s)
        self.store = ConversationStore(data_dir / "conversations.sqlite3")
        from app.mcp_service import McpService

        self.mcp = McpService(data_dir / "mcp-servers.json")
        from app.documents_service import DocumentsService

        self.documents = DocumentsService(self.client, data_dir / "documents.sqlite3", self.store)
        self.documents.error.connect(lambda p: self.show_error(p))
        self.chat = ChatService(self.client, self.store, tools=self.mcp, always_allowed=self.mcp.always_allowed,
                                decode_limit=self._decode_limit, augment=self.documents.augment)
        self.chat.tool_call_changed.connect(lambda _: self.mcp.keep_allowed())
        self._failed_servers: set[str] = set()
        self.closed = asyncio.get_event_loop().create_future()
        self._tasks: set[asyncio.Task] = set()
        from app.models import ModelStoreService
        from app.presets import PresetStore
        from app.remotes import RemotesService

        self.presets = PresetStore(data_dir / "prompt-presets.json")
        self.models = ModelStoreService(self.client, data_dir)
        self.models.error.connect(self.show_error)
        self.models.local_changed.connect(self._local_models)
        self._local_ids: list[str] = []  #: the models on this computer (the last ``local_changed``)
        self.remotes = RemotesService(self.client, data_dir)  # remote engines: widgets added to the pages' ends
        self.chat_page = ChatPage(self.chat, self.documents, self.spawn, presets=self.presets, models=self.models)
        self.mcp.servers_changed.connect(self._mcp_changed)
        self.server_page = ServerPage(self.service, start=lambda: self.spawn(self.start_service()),
                                      stop=lambda: self.spawn(self.service.stop()),
                                      restart=lambda: self.spawn(self.restart_service()))
        self.settings_page = SettingsPage(self.settings, start_on_login)
        self.settings_page.saved.connect(self._settings_saved)
        pages: dict[str, QWidget] = {"Chat": self.chat_page, "Server": self.server_page,
                                     "Settings": self._settings_tabs()}
        self.models_page = self._models_page()
        pages["Models"] = self.models_page
        from app.ui import remotes_box

        self.remote_widgets = remotes_box.attach(self.models_page, self.remotes_tab, self.server_page,
                                                 self.remotes, self.service.health_changed, self.spawn)
        self.remotes_column.addStretch(1)
        self.remotes.changed.connect(lambda _: self._local_models(self._local_ids))
        self.window = MainWindow(pages, rethemers=[self.chat_page.retheme])
        self._restore_window()
        if self.store.problem:  # the damaged history was set aside: say so where the user looks
            self.show_error(UserError("The chat history was damaged.", self.store.problem,
                                      "Nothing else is needed; the damaged file is kept for you to inspect."))
        self.window.setWindowIcon(state_icon(RUNNING))
        self.window.close_handler = self._window_closing
        self.window.quit_handler = self.quit  # Ctrl+Q quits from the window, as the tray's Quit does
        self.tray = Tray(self.service, open_window=self.open_window,
                         start=lambda: self.spawn(self.start_service()),
                         stop=lambda: self.spawn(self.service.stop()), quit=self.quit)
        if tray_available is not None:
            self.tray.available = tray_available
        self.remote_widgets["tray"] = remotes_box.attach_tray(self.tray.menu, self.service.health_changed)
        self.service.stats_changed.connect(self.models.running_from_stats)
        self.service.problem.connect(self._service_problem)
        self.service.state_changed.connect(self._service_state)
        self.service.state_changed.connect(lambda s: self.models.forget_loaded() if s != RUNNING else None)
        self.service.health_changed.connect(lambda _: self._service_state(self.service.state))
        self.chat.error.connect(self.show_error)
        self.chat.finished.connect(self._answer_finished)
        self.no_tray_notice: QMessageBox | None = None
        self._service_banner: UserError | None = None
        self.theme: Theme | None = None  #: the theme applied (``apply_theme``)
        self.apply_theme()
        qapp.styleHints().colorSchemeChanged.connect(lambda _: self.apply_theme())

    def _settings_tabs(self) -> QWidget:
        """Settings: the general page, the MCP servers and the remote engines."""
        from PySide6.QtWidgets import QTabWidget

        from app.ui.mcp_panel import McpPanel

        from PySide6.QtWidgets import QHBoxLayout, QVBoxLayout, QWidget

        self.mcp_panel = McpPanel(self.mcp, self.spawn)
        general = QWidget()  # the form at a readable width, not stretched across the window
        gl = QHBoxLayout(general)
        gl.setContentsMargins(0, 0, 0, 0)
        self.settings_page.setMaximumWidth(760)
        gl.addWidget(self.settings_page, 1)
        gl.addStretch(0)
        tabs = QTabWidget()
        tabs.setObjectName("settingsTabs")
        tabs.setDocumentMode(True)
        tabs.addTab(general, "General")
        tabs.addTab(self.mcp_panel, "MCP servers")
        self.remotes_tab = QWidget()  # remote engines: their box is added when they are wired up
        self.remotes_tab.setMaximumWidth(760)
        self.remotes_column = QVBoxLayout(self.remotes_tab)
        self.remotes_column.setContentsMargins(24, 20, 24, 20)  # the MCP tab's margins
        tabs.addTab(self.remotes_tab, "Remote engines")
        page = QWidget()
        pl = QHBoxLayout(page)
        pl.setContentsMargins(0, 12, 0, 0)
        pl.addWidget(tabs)
        self.settings_tabs = tabs
        return page

    def _models_page(self) -> ModelsPage:
        """The model manager page (``self.models`` is built in ``__init__``), the first-run
        suggestion and the quantize jobs."""
        from app.first_run import FirstRun
        from app.ui.models_page import ModelsPage

        self.first_run = FirstRun(self.chat_page.suggestion_card, self.models, self.spawn,
                                  use=self.chat_page.use_model, done=self._suggestion_done)
        from app.quantize_jobs import QuantizeService

        self.quantize = QuantizeService(self.client, self.data_dir, self.models.refresh_local)
        self.quantize.error.connect(self.show_error)
        from app.model_settings import ModelSettings

        return ModelsPage(self.models, self.spawn, self.quantize, ModelSettings(self.client, self.data_dir))

    def _restore_window(self) -> None:
        """The size the window had and the chat that was open when the app last closed; the
        chat that is open from now on is remembered as it changes."""
        from app.window_state import WindowStateStore

        self.window_state_store = WindowStateStore(self.data_dir / "window-state.json")
        self.window_state = state = self.window_state_store.load()
        if state.width and state.height:
            room = self.window.screen().availableGeometry().size()
            self.window.resize(max(min(state.width, room.width()), self.window.minimumWidth()),
                               max(min(state.height, room.height()), self.window.minimumHeight()))
        if state.maximized:
            self.window.setWindowState(self.window.windowState() | Qt.WindowState.WindowMaximized)
        if state.conversation and self.store.get(state.conversation) is not None:
            self.chat.select(state.conversation)
        self.chat.current_changed.connect(self._remember_chat)

    def _remember_chat(self, c) -> None:
        conversation = c.id if c is not None else 0
        if conversation != self.window_state.conversation:
            self.window_state.conversation = conversation
            self.window_state_store.save(self.window_state)

    def _remember_window(self) -> None:
        w, state = self.window, self.window_state
        state.maximized = w.isMaximized()
        if not state.maximized:  # a maximized window's own size is the screen's: keep the one before
            state.width, state.height = w.width(), w.height()
        self.window_state_store.save(state)

    def _suggestion_done(self) -> None:
        if not self.settings.suggestion_done:
            self.settings.suggestion_done = True
            self.settings_store.save(self.settings)

    # lifecycle
    def spawn(self, coro) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        e = task.exception() if not task.cancelled() else None
        if e is not None:
            log.error("background task failed: %r", e)
            self.show_error(explain(e, port=self.settings.port))

    async def start(self, show_window: bool = True) -> bool:
        if show_window or not self.tray.available:  # hidden only where the tray can bring it back
            self.window.show()
            self.chat_page.input.setFocus()  # the first thing a person does is type
        self.spawn(self.mcp.start_all())  # servers start beside the service; a slow one delays nothing
        ok = await self.service.ensure()
        if ok:
            await self.refresh_models()
        return ok

    async def start_service(self) -> None:
        if await self.service.start():
            await self.refresh_models()

    async def restart_service(self) -> None:
        """Stop the service this app runs and start it again: new settings (a port) apply."""
        if await self.service.restart():
            await self.refresh_models()

    async def refresh_models(self) -> None:
        try:
            await self.models.refresh()
        except ApiProblem as e:
            self.show_error(explain(e, port=self.settings.port))
        else:
            if not self.settings.suggestion_done:  # first run: the best model for this computer
                self.first_run.offer(self.models.catalog.all_entries())
        await self.remotes.refresh()

    def _local_models(self, ids: list[str]) -> None:
        self._local_ids = list(ids)
        remote = [m["id"] for m in self.remotes.state.get("models") or []]
        chat_ids = self._local_ids + [r for r in remote if r not in self._local_ids]  # remote ones after
        self.chat_page.set_models(chat_ids, self.settings.default_model if self.service.owned else "")
        self.settings_page.set_models(ids)

    def open_window(self) -> None:
        self.window.show()
        self.window.raise_()
        self.window.activateWindow()

    def quit(self) -> None:
        self.spawn(self.shutdown())

    async def shutdown(self, stop_service: bool = True) -> None:
        self.chat.stop()
        self.models.close()
        self.quantize.close()
        await self.mcp.stop_all()
        await self.service.close(stop_child=stop_service)
        await self.client.close()
        self.tray.hide()
        if self.window.isVisible():
            self._remember_window()
        self.window.close_handler = None
        self.theme_applier.close()
        self.window.close()
        self.store.close()
        self.documents.close()
        if not self.closed.done():
            self.closed.set_result(None)

    def _window_closing(self) -> bool:
        """True: the window closes and the app quits; False: it hides to the tray."""
        self._remember_window()
        if self.settings.keep_in_tray and self.tray.available:
            return False
        if not self.tray.available and self.settings.keep_in_tray and not self.settings.told_no_tray:
            self.settings.told_no_tray = True
            self.settings_store.save(self.settings)
            box = QMessageBox(QMessageBox.Icon.NoIcon, "Hearth is quitting",
                              "This desktop has no system tray, so Hearth cannot keep running in the "
                              "background: closing the window quits Hearth and stops the service it started.")
            box.setModal(False)
            box.finished.connect(lambda _: self.quit())
            box.show()
            self.no_tray_notice = box
            return True
        self.quit()
        return True

    # settings
    def apply_theme(self, dark: bool | None = None) -> None:
        """The theme the settings choose: light, dark, or the OS's colour scheme ("system"; light
        where the desktop reports none); ``dark`` forces one (the screenshots take both)."""
        from app.ui.style import palette, stylesheet, theme_for

        if dark is None:
            choice = self.settings.theme
            dark = choice == "dark" or (choice == "system"
                                        and self.qapp.styleHints().colorScheme() == Qt.ColorScheme.Dark)
        if self.theme is not None and self.theme.dark == dark:
            return  # no change: restyling every widget costs a visible pause
        first = self.theme is None
        if not first:
            self.chat_page.view.release_hidden(everything=True)  # rebuilt after, a few per turn
        self.theme = theme = theme_for(dark)
        if first:
            if self.qapp.style().name().lower() != "fusion":  # setStyle repolishes every widget alive
                self.qapp.setStyle("Fusion")  # the same widgets on every OS, so the theme's colours hold
            from app.ui.theme_apply import ThemeApplier

            self.theme_applier = ThemeApplier(self.qapp, self.window, self._theme_parts)
        self.qapp.setPalette(palette(theme))
        self.chat_page.split.handle(1).setStyleSheet(f"background: {theme.border};")
        self.theme_applier.apply(stylesheet(theme), at_once=first, then=lambda: self.window.retheme(theme))

    def _theme_parts(self) -> list:
        """The styled parts of the window (see ``ThemeApplier``): the rail, the banner, the status
        bar, and each page (cut into parts of a few dozen widgets)."""
        w = self.window
        return [(None, w.rail), (None, w.banner), (None, w.statusBar())] + [(p, p) for p in w.pages.values()]

    def _settings_saved(self, new: AppSettings) -> None:
        for name in AppSettings.__slots__:
            setattr(self.settings, name, getattr(new, name))
        self.settings_store.save(self.settings)
        self.apply_theme()
        # a new address: the pages show what answers there, not what answered at the old one
        if self.service.set_address(f"http://{connect_host(self.settings.host)}:{self.settings.port}"):
            self.spawn(self._recheck_service())
        self.server_page.refresh()

    async def _recheck_service(self) -> None:
        if await self.service.recheck():
            await self.refresh_models()

    def _mcp_changed(self) -> None:
        """The Tools switch counts the tools on offer; a server that has just failed is said once."""
        self.chat_page.set_tool_count(len(self.mcp.api_tools()))
        failed = {n for n, c in self.mcp.hub.connections.items() if c.state == "failed"}
        for name in sorted(failed - self._failed_servers):
            self.show_error(UserError(f"The MCP server {name} is not running.", self.mcp.hub.connections[name].error,
                                      "Its tools are not offered; see Settings → MCP servers."))
        self._failed_servers = failed

    # problems
    def _decode_limit(self, model_id: str) -> float | None:
        """The decode limit the service reported for a resident model (None: not known)."""
        row = next((m for m in self.models.residents if m.get("id") == model_id), None)
        limit = row.get("decode_limit_tps") if row is not None else None
        return float(limit) if isinstance(limit, (int, float)) else None

    def show_error(self, problem: UserError) -> None:
        """The problem in the banner, with the button that answers it where there is one (a
        service that is not running: Start)."""
        if problem.code == SERVICE_UNREACHABLE and self.service.state != RUNNING:
            self.window.banner.show_problem(problem, "Start server", lambda: self.spawn(self.start_service()))
            return
        self.window.banner.show_problem(problem)

    def _answer_finished(self, answer) -> None:
        """A complete answer is the recovery a model problem's banner asked for: it goes."""
        shown = self.window.banner.problem
        if answer.meta.get("finish") in ("stop", "length", "tool_calls") and shown is not None \
                and shown.code in MODEL_PROBLEMS | SERVICE_PROBLEMS:
            self.window.banner.show_problem(None)

    def _service_problem(self, problem: UserError | None) -> None:
        state = self.service.state
        if problem is None:
            if self.window.banner.problem is self._service_banner and self._service_banner is not None:
                self.window.banner.show_problem(None)
                self._service_banner = None
            return
        self._service_banner = problem
        if state in (DIED, UNREACHABLE):
            self.window.banner.show_problem(problem, "Restart server", lambda: self.spawn(self.start_service()))
        elif state == FOREIGN:
            self.window.banner.show_problem(problem, "Open Settings", lambda: self.window.show_page("Settings"))
        else:
            self.window.banner.show_problem(problem)

    def _service_state(self, state: str) -> None:
        shown = self.window.banner.problem
        if state == RUNNING and shown is not None and shown.code in SERVICE_PROBLEMS:
            self.window.banner.show_problem(None)  # the service answers again: the problem is over
        model = self.service.loaded_model
        text = f"Service: {STATE_WORDS.get(state, state)} at {self.service.url}"
        if state == RUNNING and model:
            text += f" · {'models' if ',' in model else 'model'} {model}"
        self.window.set_service_text(text)
