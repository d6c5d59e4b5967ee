"""The settings of one chat: its system prompt (from a preset, or saved as one) and sampling."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFormLayout, QHBoxLayout, QLabel, QLineEdit,
    QPlainTextEdit, QPushButton, QSpinBox, QVBoxLayout, QWidget,
)

from app.conversations import Conversation, Sampling

CHOOSE = "Choose a preset…"


class ConversationSettingsDialog(QDialog):
    """System prompt and sampling of one conversation; ``presets`` (a ``PresetStore``) offers
    ready system prompts and keeps the user's own."""

    def __init__(self, c: Conversation, parent=None, presets=None) -> None:
        super().__init__(parent)
        self.presets = presets
        self.setWindowTitle("Hearth — chat settings")
        form = QFormLayout(self)
        heading = QLabel("Chat settings")
        heading.setObjectName("dialogHeading")
        form.addRow(heading)
        self.system = QPlainTextEdit(c.system_prompt)
        self.system.setPlaceholderText("For example: You are a concise assistant.")
        self.system.setTabChangesFocus(True)
        self.temperature = QDoubleSpinBox(minimum=0.0, maximum=2.0, singleStep=0.1, value=c.sampling.temperature)
        self.top_p = QDoubleSpinBox(minimum=0.0, maximum=1.0, singleStep=0.05, value=c.sampling.top_p)
        self.max_tokens = QSpinBox(minimum=1, maximum=32768, value=c.sampling.max_tokens)
        self.seed = QSpinBox(minimum=-1, maximum=2**31 - 1, value=-1 if c.sampling.seed is None else c.sampling.seed)
        self.seed.setSpecialValueText("random")
        if presets is not None:
            form.addRow("Preset", self._preset_row())
        form.addRow("System prompt", self.system)
        if presets is not None:
            form.addRow("", self._save_row())
        form.addRow("Temperature", self.temperature)
        form.addRow("Top p", self.top_p)
        form.addRow("Max answer tokens", self.max_tokens)
        form.addRow("Seed", self.seed)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        if presets is not None:
            self._fill_presets()
            self.system.textChanged.connect(self._prompt_edited)

    # presets
    def _preset_row(self) -> QWidget:
        row = QWidget()
        lay = QHBoxLayout(row)
        lay.setContentsMargins(0, 0, 0, 0)
        self.preset_picker = QComboBox()
        self.preset_picker.setAccessibleName("System prompt preset")
        self.preset_picker.activated.connect(self._preset_picked)
        self.delete_preset_button = QPushButton("Delete")
        self.delete_preset_button.setToolTip("Delete this preset (the built-in ones stay)")
        self.delete_preset_button.clicked.connect(self._delete_preset)
        lay.addWidget(self.preset_picker, 1)
        lay.addWidget(self.delete_preset_button)
        return row

    def _save_row(self) -> QWidget:
        row = QWidget()
        lay = QVBoxLayout(row)
        lay.setContentsMargins(0, 0, 0, 0)
        line = QHBoxLayout()
        self.preset_name = QLineEdit()
        self.preset_name.setPlaceholderText("Name, to keep this prompt as a preset")
        self.preset_name.setAccessibleName("Preset name")
        self.save_preset_button = QPushButton("Save as preset")
        self.save_preset_button.clicked.connect(self._save_preset)
        self.preset_name.returnPressed.connect(self._save_preset)
        line.addWidget(self.preset_name, 1)
        line.addWidget(self.save_preset_button)
        self.preset_note = QLabel()
        self.preset_note.setObjectName("modelDetail")
        self.preset_note.setWordWrap(True)
        self.preset_note.hide()
        lay.addLayout(line)
        lay.addWidget(self.preset_note)
        return row

    def _fill_presets(self, chosen: str | None = None) -> None:
        p = self.preset_picker
        p.blockSignals(True)
        p.clear()
        p.addItem(CHOOSE, "")
        for preset in self.presets.presets():
            p.addItem(preset.name + ("" if preset.builtin else " (yours)"), preset.name)
        match = self.presets.get(chosen) if chosen else self.presets.matching(self.system.toPlainText())
        p.setCurrentIndex(max(0, p.findData(match.name)) if match else 0)
        p.blockSignals(False)
        self._update_delete()

    def _update_delete(self) -> None:
        preset = self.presets.get(self.preset_picker.currentData() or "")
        self.delete_preset_button.setEnabled(preset is not None and not preset.builtin)

    def _preset_picked(self, _index: int) -> None:
        preset = self.presets.get(self.preset_picker.currentData() or "")
        if preset is not None:
            self.system.blockSignals(True)
            self.system.setPlainText(preset.prompt)
            self.system.blockSignals(False)
            if preset.temperature is not None:
                self.temperature.setValue(preset.temperature)
        self._update_delete()

    def _prompt_edited(self) -> None:
        match = self.presets.matching(self.system.toPlainText())
        self.preset_picker.setCurrentIndex(max(0, self.preset_picker.findData(match.name)) if match else 0)
        self._update_delete()

    def _save_preset(self) -> None:
        name = self.preset_name.text()
        problem = self.presets.save(name, self.system.toPlainText(), self.temperature.value())
        self.preset_note.setText(problem or f"Saved as “{' '.join(name.split())}”.")
        self.preset_note.setProperty("error", bool(problem))
        self.preset_note.show()
        if problem is None:
            self.preset_name.clear()
            self._fill_presets(" ".join(name.split()))

    def _delete_preset(self) -> None:
        name = self.preset_picker.currentData() or ""
        if self.presets.delete(name):
            self.preset_note.setText(f"Deleted “{name}”.")
            self.preset_note.show()
            self._fill_presets()

    def sampling(self) -> Sampling:
        seed = self.seed.value()
        return Sampling(self.temperature.value(), self.top_p.value(), self.max_tokens.value(),
                        None if seed < 0 else seed)
