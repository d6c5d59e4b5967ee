"""Small self-contained widgets for remote engines: the remote models with their badge and
where their prompts go (Models page), the upstreams with add and remove (Settings, its Remote engines tab), and
their health in one line (Server page)."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QCheckBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPushButton, QVBoxLayout, QWidget,
)

from app.background import Run
from app.remotes import RemotesService, health_words, privacy_line
from app.ui.blocks import clear_layout


class RemoteModelsBox(QGroupBox):
    """The models other machines serve to this Hearth; hidden while there are none."""

    def __init__(self, remotes: RemotesService) -> None:
        super().__init__("Remote models")
        self.rows = QVBoxLayout(self)
        self.labels: list[tuple[QLabel, QLabel, QLabel]] = []
        remotes.changed.connect(self.show_state)
        self.show_state(remotes.state)

    def show_state(self, state: dict) -> None:
        clear_layout(self.rows)
        self.labels = []
        for m in state.get("models") or []:
            row = QWidget()
            lay = QHBoxLayout(row)
            lay.setContentsMargins(0, 2, 0, 2)
            name = QLabel(m["id"])
            name.setObjectName("modelName")
            badge = QLabel("remote")
            badge.setObjectName("remoteBadge")
            badge.setStyleSheet("background: #7a5cff; color: white; border-radius: 4px; padding: 1px 6px;")
            line = QLabel(f"{privacy_line(m)} · via {m.get('upstream')} · {m.get('health', '?')}")
            line.setObjectName("modelDetail")
            lay.addWidget(name)
            lay.addWidget(badge)
            lay.addWidget(line, 1)
            self.rows.addWidget(row)
            self.labels.append((name, badge, line))
        self.setVisible(bool(self.labels))


class UpstreamsBox(QGroupBox):
    """Settings: the upstreams (state, Remove) and a form to add one."""

    def __init__(self, remotes: RemotesService, run: Run) -> None:
        super().__init__("Remote engines (other machines serving models)")
        self.remotes, self.run = remotes, run
        lay = QVBoxLayout(self)
        note = QLabel("Off until you add one. Prompts to a remote model leave this computer.")
        note.setWordWrap(True)
        self.list = QVBoxLayout()
        form = QFormLayout()
        self.name = QLineEdit()
        self.name.setPlaceholderText("gpu-box")
        self.url = QLineEdit()
        self.url.setPlaceholderText("http://192.168.1.20:8000 (vLLM, llama-server, Ollama, Hearth)")
        self.key = QLineEdit()
        self.key.setEchoMode(QLineEdit.EchoMode.Password)
        self.key.setPlaceholderText("API key, if it needs one (kept in the OS keyring)")
        self.insecure = QCheckBox("Allow plain HTTP outside my private network")
        self.add_button = QPushButton("Add")
        self.add_button.clicked.connect(self._add)
        form.addRow("Name", self.name)
        form.addRow("Address", self.url)
        form.addRow("Key", self.key)
        form.addRow("", self.insecure)
        self.message = QLabel()
        self.message.setObjectName("errorLabel")
        self.message.setWordWrap(True)
        lay.addWidget(note)
        lay.addLayout(self.list)
        lay.addLayout(form)
        lay.addWidget(self.add_button)
        lay.addWidget(self.message)
        self.remove_buttons: dict[str, QPushButton] = {}
        remotes.changed.connect(self.show_state)
        remotes.problem.connect(self.message.setText)
        self.show_state(remotes.state)

    def show_state(self, state: dict) -> None:
        clear_layout(self.list)
        self.remove_buttons = {}
        for u in state.get("upstreams") or []:
            row = QWidget()
            lay = QHBoxLayout(row)
            lay.setContentsMargins(0, 0, 0, 0)
            h = u.get("health") or {}
            text = f"{u['name']}: {u['url']} · {h.get('state', '?')} · {len(u.get('models') or [])} models"
            if h.get("last_error") and h.get("state") != "up":
                text += f" · {h['last_error']}"
            label = QLabel(text)
            label.setWordWrap(True)
            remove = QPushButton("Remove")
            remove.clicked.connect(lambda _=False, n=u["name"]: self.run(self.remotes.remove(n)))
            lay.addWidget(label, 1)
            lay.addWidget(remove)
            self.list.addWidget(row)
            self.remove_buttons[u["name"]] = remove

    def _add(self) -> None:
        if not self.name.text().strip() or not self.url.text().strip():
            self.message.setText("Give the remote engine a name and an address.")
            return

        self.run(self.remotes.add(self.name.text(), self.url.text(), self.key.text(), self.insecure.isChecked()))
        self.key.clear()


class RemotesHealthLabel(QLabel):
    """Server page: each upstream's state, from /health's ``remotes``."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("modelDetail")
        self.setWordWrap(True)
        self.hide()

    def show_health(self, health: dict) -> None:
        words = health_words(health.get("remotes") or [])
        self.setText(f"Remote engines: {words}" if words else "")
        self.setVisible(bool(words))


def attach(models_page: QWidget | None, settings_tab: QWidget, server_page: QWidget,
           remotes: RemotesService, health_changed, run: Run) -> dict:
    """Add the widgets at the end of each page's layout (the pages themselves stay as they are)."""
    upstreams, health = UpstreamsBox(remotes, run), RemotesHealthLabel()
    widgets: dict = {"upstreams": upstreams, "health": health}
    _add_at_end(settings_tab, upstreams)
    _add_at_end(server_page, health)
    health_changed.connect(health.show_health)
    if models_page is not None:
        widgets["models"] = models = RemoteModelsBox(remotes)
        _add_at_end(models_page, models)
    return widgets


def _add_at_end(page: QWidget, w: QWidget) -> None:
    lay = page.layout()
    assert lay is not None  # each page lays out its own widgets
    lay.addWidget(w)


def attach_tray(menu, health_changed):
    """A line in the tray menu with the upstreams' states (hidden while there are none)."""
    menu.addSeparator()
    action = menu.addAction("")
    action.setEnabled(False)
    action.setVisible(False)

    def show(health: dict) -> None:
        words = health_words(health.get("remotes") or [])
        action.setText(f"Remote: {words}" if words else "")
        action.setVisible(bool(words))

    health_changed.connect(show)
    return action
