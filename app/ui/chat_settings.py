"""The settings of one chat: its system prompt (from a preset, or saved as one) and sampling:
temperature, top-p, top-k, min-p, repeat penalty, answer length, seed and stop strings; and what
the chat sends once it is longer than the model's context. A preset
saved here keeps every one of them but the seed."""

from __future__ import annotations

from PySide6.QtWidgets import (
    QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFormLayout, QGridLayout, QHBoxLayout, QLabel, QLineEdit,
    QPlainTextEdit, QPushButton, QSpinBox, QVBoxLayout, QWidget,
)

from app.conversations import OVERFLOW_POLICIES, Conversation, Sampling
from runtime.sampling_params import LIMITS, MAX_STOPS

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
        s = c.sampling
        self.temperature = QDoubleSpinBox(minimum=0.0, maximum=2.0, singleStep=0.1, value=s.temperature)
        self.top_p = QDoubleSpinBox(minimum=0.0, maximum=1.0, singleStep=0.05, value=s.top_p)
        self.top_k = QSpinBox(minimum=0, maximum=1000, value=min(s.top_k, 1000))
        self.top_k.setSpecialValueText("off")
        self.min_p = QDoubleSpinBox(minimum=0.0, maximum=1.0, singleStep=0.01, value=s.min_p)
        self.repeat_penalty = QDoubleSpinBox(minimum=LIMITS["repeat_penalty"][0], maximum=2.0, singleStep=0.05,
                                             value=s.repeat_penalty)
        self.repeat_penalty.setToolTip("1.00 leaves repeated words alone; 1.1 makes them a little less likely")
        self.max_tokens = QSpinBox(minimum=1, maximum=32768, value=s.max_tokens)
        self.seed = QSpinBox(minimum=-1, maximum=2**31 - 1, value=-1 if s.seed is None else s.seed)
        self.seed.setSpecialValueText("random")
        self.stop = QPlainTextEdit("\n".join(_shown(x) for x in s.stop))
        self.stop.setPlaceholderText("Stop strings, one a line (\\n for a line break)")
        self.stop.setAccessibleName("Stop strings")
        self.stop.setTabChangesFocus(True)
        self.stop.setFixedHeight(56)
        self.overflow = QComboBox()
        self.overflow.setAccessibleName("When the chat is longer than the context")
        for policy, words in OVERFLOW_POLICIES.items():
            self.overflow.addItem(words, policy)
        self.overflow.setCurrentIndex(max(0, self.overflow.findData(s.context_overflow)))
        self.overflow.setToolTip("A chat longer than the model's context: leave whole older turns out of what "
                                 "is sent (the meter says how many), or stop with an error")
        if presets is not None:
            form.addRow("Preset", self._preset_row())
        form.addRow("System prompt", self.system)
        if presets is not None:
            form.addRow("", self._save_row())
        form.addRow(self._sampling_grid())
        form.addRow("Stop strings", self.stop)
        form.addRow("Longer than the context", self.overflow)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)
        if presets is not None:
            self._fill_presets()
            self.system.textChanged.connect(self._prompt_edited)

    def _sampling_grid(self) -> QWidget:
        """The numbers two to a row, so the dialog fits an 800x600 screen."""
        grid = QWidget()
        g = QGridLayout(grid)
        g.setContentsMargins(0, 0, 0, 0)
        pairs = (("Temperature", self.temperature), ("Top p", self.top_p), ("Top k", self.top_k),
                 ("Min p", self.min_p), ("Repeat penalty", self.repeat_penalty), ("Max answer tokens", self.max_tokens),
                 ("Seed", self.seed))
        for i, (label, w) in enumerate(pairs):
            g.addWidget(QLabel(label), i // 2, (i % 2) * 2)
            g.addWidget(w, i // 2, (i % 2) * 2 + 1)
        g.setColumnStretch(1, 1)
        g.setColumnStretch(3, 1)
        return grid

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
            self._apply(preset.settings)
        self._update_delete()

    def _apply(self, settings: dict) -> None:
        """A preset's other settings into the fields (those it does not set stay as they are)."""
        boxes: dict[str, QSpinBox | QDoubleSpinBox] = {
            "top_p": self.top_p, "top_k": self.top_k, "min_p": self.min_p, "repeat_penalty": self.repeat_penalty,
            "max_tokens": self.max_tokens}
        for name, box in boxes.items():
            if name in settings:
                box.setValue(settings[name])
        if "stop" in settings:
            self.stop.setPlainText("\n".join(_shown(x) for x in settings["stop"]))

    def settings(self) -> dict:
        """What a preset saved now keeps besides the prompt and the temperature."""
        s = self.sampling()
        return {"top_p": s.top_p, "top_k": s.top_k, "min_p": s.min_p, "repeat_penalty": s.repeat_penalty,
                "max_tokens": s.max_tokens, "stop": list(s.stop)}

    def _prompt_edited(self) -> None:
        match = self.presets.matching(self.system.toPlainText())
        self.preset_picker.setCurrentIndex(max(0, self.preset_picker.findData(match.name)) if match else 0)
        self._update_delete()

    def _save_preset(self) -> None:
        name = self.preset_name.text()
        problem = self.presets.save(name, self.system.toPlainText(), self.temperature.value(), self.settings())
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
        stop = tuple(_typed(line) for line in self.stop.toPlainText().splitlines() if line)[:MAX_STOPS]
        return Sampling(self.temperature.value(), self.top_p.value(), self.max_tokens.value(),
                        None if seed < 0 else seed, self.top_k.value(), round(self.min_p.value(), 2),
                        round(self.repeat_penalty.value(), 2), stop, self.overflow.currentData())


def _shown(stop: str) -> str:
    """A stop string on its line: a line break as \\n."""
    return stop.replace("\\", "\\\\").replace("\n", "\\n")


def _typed(line: str) -> str:
    """A line of the stop strings' box as the string it means (\\n: a line break, \\\\: a backslash)."""
    out, i = [], 0
    while i < len(line):
        if line[i] == "\\" and i + 1 < len(line) and line[i + 1] in "n\\":
            out.append("\n" if line[i + 1] == "n" else "\\")
            i += 2
        else:
            out.append(line[i])
            i += 1
    return "".join(out)
