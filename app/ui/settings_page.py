"""The settings page: service options, start on login, tray behaviour, theme."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPushButton, QSpinBox,
    QVBoxLayout, QWidget,
)

from app.settings import KV_TYPES, OLLAMA_PORT, AppSettings

THEME_WORDS = {"system": "System (follow the desktop)", "light": "Light", "dark": "Dark"}


def _editable_combo(placeholder: str) -> QComboBox:
    """A drop-down whose text can also be typed, showing ``placeholder`` while it is empty."""
    box = QComboBox()
    box.setEditable(True)
    edit = box.lineEdit()
    assert edit is not None  # an editable combo box has its line edit
    edit.setPlaceholderText(placeholder)
    return box


class SettingsPage(QWidget):
    saved = Signal(object)  # the new AppSettings

    def __init__(self, settings: AppSettings, start_on_login: Callable[[bool], None] | None) -> None:
        """``start_on_login``: turns starting at login on or off; None where this build cannot."""
        super().__init__()
        self.settings = settings
        self._start_on_login = start_on_login
        lay = QVBoxLayout(self)
        lay.setContentsMargins(20, 16, 20, 16)
        service = QGroupBox("Service")
        f = QFormLayout(service)
        self.port = QSpinBox(minimum=1, maximum=65535)
        self.host = QLineEdit()
        self.host.setToolTip("127.0.0.1 keeps the API on this computer; 0.0.0.0 opens it to your network.")
        self.model = _editable_combo("catalog id or path to a .gguf file")
        self.draft = _editable_combo("none (no speculative decoding)")
        self.ctx = QSpinBox(minimum=0, maximum=1 << 20, singleStep=1024)
        self.ctx.setSpecialValueText("Automatic")  # 0: per model, as much as memory holds up to 32768
        self.ctx.setToolTip("Automatic: each model gets its trained context up to 32,768 tokens (room for a "
                            "coding agent's prompt), less where memory is short.")
        self.parallel = QSpinBox(minimum=1, maximum=64)
        self.kv_type = QComboBox()
        self.kv_type.addItem("Automatic", "")  # f16, or q8_0 where only that holds the context
        for t in KV_TYPES:
            self.kv_type.addItem(t, t)
        f.addRow("Port", self.port)
        f.addRow("Bind address", self.host)
        f.addRow("Default model", self.model)
        f.addRow("Draft model", self.draft)
        f.addRow("Context (tokens)", self.ctx)
        f.addRow("Parallel requests", self.parallel)
        f.addRow("KV cache type", self.kv_type)
        self.ollama_port = QCheckBox(f"Also listen on Ollama's port ({OLLAMA_PORT})")
        self.ollama_port.setToolTip("Tools that look for Ollama (editor extensions, Open WebUI) find Hearth with no "
                                    "setup. The service will not start while Ollama itself uses the port.")
        f.addRow("", self.ollama_port)
        desktop = QGroupBox("Desktop")
        d = QVBoxLayout(desktop)
        self.login = QCheckBox("Start Hearth when I log in")
        if start_on_login is None:
            self.login.setEnabled(False)
            self.login.setToolTip("Starting at login is not available in this installation.")
        self.tray = QCheckBox("Keep the service running in the tray when the window closes")
        self.theme = QComboBox()
        for key, words in THEME_WORDS.items():
            self.theme.addItem(words, key)
        self.theme.setAccessibleName("Theme")
        self.theme.setToolTip("System follows your desktop's light or dark setting; Light and Dark always use one.")
        theme_row = QHBoxLayout()
        theme_row.addWidget(QLabel("Theme"))
        theme_row.addWidget(self.theme)
        theme_row.addStretch(1)
        for w in (self.login, self.tray):
            d.addWidget(w)
        d.addLayout(theme_row)
        row = QHBoxLayout()
        self.message = QLabel()
        self.message.setObjectName("settingsMessage")
        self.message.setWordWrap(True)
        self.save_button = QPushButton("Save")
        self.save_button.setObjectName("primaryButton")
        self.save_button.clicked.connect(self.save)
        self.revert_button = QPushButton("Revert")
        self.revert_button.clicked.connect(lambda: self.load(self.settings))
        row.addWidget(self.message, 1)
        row.addWidget(self.revert_button)
        row.addWidget(self.save_button)
        lay.addWidget(service)
        lay.addWidget(desktop)
        lay.addLayout(row)
        lay.addStretch(1)
        self.load(settings)

    def load(self, s: AppSettings) -> None:
        self.port.setValue(s.port)
        self.host.setText(s.host)
        self.model.setCurrentText(s.default_model)
        self.draft.setCurrentText(s.draft_model)
        self.ctx.setValue(s.ctx)
        self.parallel.setValue(s.parallel)
        self.kv_type.setCurrentIndex(max(self.kv_type.findData(s.kv_type), 0))
        self.ollama_port.setChecked(s.ollama_port)
        self.login.setChecked(s.start_on_login)
        self.tray.setChecked(s.keep_in_tray)
        self.theme.setCurrentIndex(max(self.theme.findData(s.theme), 0))
        self.message.clear()

    def set_models(self, ids: list[str]) -> None:
        """Offer the local models in the model and draft pickers (typing any id or path still works)."""
        for combo, extra in ((self.model, []), (self.draft, [""])):
            current = combo.currentText()
            combo.clear()
            combo.addItems(extra + ids)
            combo.setCurrentText(current)

    def values(self) -> AppSettings:
        return replace(self.settings, port=self.port.value(), host=self.host.text().strip(),
                       default_model=self.model.currentText().strip(),
                       draft_model=self.draft.currentText().strip(),
                       ctx=self.ctx.value(), parallel=self.parallel.value(), kv_type=self.kv_type.currentData(),
                       ollama_port=self.ollama_port.isChecked(),
                       start_on_login=self.login.isChecked(), keep_in_tray=self.tray.isChecked(),
                       theme=self.theme.currentData())

    def save(self) -> None:
        new = self.values()
        problem = new.validate() or (None if new.default_model else "Choose a default model.")
        if problem:
            self.message.setText(problem)
            return
        if new.start_on_login != self.settings.start_on_login and self._start_on_login is not None:
            try:
                self._start_on_login(new.start_on_login)
            except OSError as e:
                self.message.setText(f"Could not change starting at login: {e}")
                return
        service_changed = any(getattr(new, k) != getattr(self.settings, k) for k in
                              ("port", "host", "default_model", "draft_model", "ctx", "parallel", "kv_type",
                               "ollama_port"))
        self.settings = new
        self.message.setText("Saved. Restart the server (Server page) to use the new service settings."
                             if service_changed else "Saved.")
        self.saved.emit(new)
