"""The settings of one chat: its system prompt (from a preset, or saved as one) and sampling:
temperature, top-p, top-k, min-p, repeat penalty, answer length, seed and stop strings; and what
the chat sends once it is longer than the model's context. A preset
saved here keeps every one of them but the seed.

Two views share the fields (``SettingsFields``): the dialog (OK applies them) and the side panel
beside the conversation, which stays open, follows the chat that is open and applies each change
as it is made (``ChatSettingsPanel``), as LM Studio's right-hand panel does."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox, QDialog, QDialogButtonBox, QDoubleSpinBox, QFormLayout, QGridLayout, QHBoxLayout, QLabel, QLineEdit,
    QPlainTextEdit, QPushButton, QScrollArea, QSpinBox, QVBoxLayout, QWidget,
)

from app.conversations import OVERFLOW_POLICIES, Conversation, Sampling
from app.presets import PresetStore
from runtime.sampling_params import LIMITS, MAX_STOPS

CHOOSE = "Choose a preset…"
#: the panel applies a change once the user stops typing for this long
APPLY_AFTER_MS = 400
PANEL_MIN_WIDTH = 200
#: the narrowest a number's field gets in the panel ("random" and "1024" still show whole)
NARROW_NUMBER = 72


class SettingsFields:
    """The fields of a chat's settings and what they mean; ``presets`` (a ``PresetStore``) offers
    ready system prompts and keeps the user's own. A mix-in of the dialog and the panel."""

    presets: PresetStore | None

    def _add_fields(self, form: QFormLayout, c: Conversation, presets, columns: int = 2) -> None:
        """The fields, as rows of ``form``; the numbers ``columns`` pairs to a row."""
        self.presets = presets
        self.system = QPlainTextEdit()
        self.system.setPlaceholderText("For example: You are a concise assistant.")
        self.system.setTabChangesFocus(True)
        self.system.setAccessibleName("System prompt")
        self.temperature = QDoubleSpinBox(minimum=0.0, maximum=2.0, singleStep=0.1)
        self.top_p = QDoubleSpinBox(minimum=0.0, maximum=1.0, singleStep=0.05)
        self.top_k = QSpinBox(minimum=0, maximum=1000)
        self.top_k.setSpecialValueText("off")
        self.min_p = QDoubleSpinBox(minimum=0.0, maximum=1.0, singleStep=0.01)
        self.repeat_penalty = QDoubleSpinBox(minimum=LIMITS["repeat_penalty"][0], maximum=2.0, singleStep=0.05)
        self.repeat_penalty.setToolTip("1.00 leaves repeated words alone; 1.1 makes them a little less likely")
        self.max_tokens = QSpinBox(minimum=1, maximum=32768)
        self.seed = QSpinBox(minimum=-1, maximum=2**31 - 1)
        self.seed.setSpecialValueText("random")
        self.stop = QPlainTextEdit()
        self.stop.setPlaceholderText("Stop strings, one a line (\\n for a line break)")
        self.stop.setAccessibleName("Stop strings")
        self.stop.setTabChangesFocus(True)
        self.stop.setFixedHeight(56)
        self.overflow = QComboBox()
        self.overflow.setAccessibleName("When the chat is longer than the context")
        for policy, words in OVERFLOW_POLICIES.items():
            self.overflow.addItem(words, policy)
        self.overflow.setToolTip("A chat longer than the model's context: leave whole older turns out of what "
                                 "is sent (the meter says how many), or stop with an error")
        if presets is not None:
            form.addRow("Preset", self._preset_row())
        form.addRow("System prompt", self.system)
        if presets is not None:
            form.addRow("", self._save_row())
        form.addRow(self._sampling_grid(columns))
        form.addRow("Stop strings", self.stop)
        form.addRow("Longer than the context", self.overflow)
        self.show_chat(c)
        if presets is not None:
            self.system.textChanged.connect(self._prompt_edited)

    def show_chat(self, c: Conversation) -> None:
        """Fill the fields from ``c``'s settings."""
        self.system.setPlainText(c.system_prompt)
        s = c.sampling
        self.temperature.setValue(s.temperature)
        self.top_p.setValue(s.top_p)
        self.top_k.setValue(min(s.top_k, 1000))
        self.min_p.setValue(s.min_p)
        self.repeat_penalty.setValue(s.repeat_penalty)
        self.max_tokens.setValue(s.max_tokens)
        self.seed.setValue(-1 if s.seed is None else s.seed)
        self.stop.setPlainText("\n".join(_shown(x) for x in s.stop))
        self.overflow.setCurrentIndex(max(0, self.overflow.findData(s.context_overflow)))
        if self.presets is not None:
            self._fill_presets()

    def _store(self) -> PresetStore:
        assert self.presets is not None  # the preset rows, and so their handlers, exist only with a store
        return self.presets

    def fields(self) -> list[QWidget]:
        """The fields a user edits (the panel applies a change of any of them)."""
        return [self.system, self.temperature, self.top_p, self.top_k, self.min_p, self.repeat_penalty,
                self.max_tokens, self.seed, self.stop, self.overflow]

    def _sampling_grid(self, columns: int = 2) -> QWidget:
        """The numbers ``columns`` pairs to a row (two: the dialog fits an 800x600 screen; one: the
        narrow panel)."""
        grid = QWidget()
        g = QGridLayout(grid)
        g.setContentsMargins(0, 0, 0, 0)
        pairs = (("Temperature", self.temperature), ("Top p", self.top_p), ("Top k", self.top_k),
                 ("Min p", self.min_p), ("Repeat penalty", self.repeat_penalty), ("Max answer tokens", self.max_tokens),
                 ("Seed", self.seed))
        for i, (label, w) in enumerate(pairs):
            g.addWidget(QLabel(label), i // columns, (i % columns) * 2)
            g.addWidget(w, i // columns, (i % columns) * 2 + 1)
            if columns == 1:
                w.setMinimumWidth(NARROW_NUMBER)  # a narrow panel: the numbers are short
        for col in range(columns):
            g.setColumnStretch(col * 2 + 1, 1)
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
        for preset in self._store().presets():
            p.addItem(preset.name + ("" if preset.builtin else " (yours)"), preset.name)
        match = self._store().get(chosen) if chosen else self._store().matching(self.system.toPlainText())
        p.setCurrentIndex(max(0, p.findData(match.name)) if match else 0)
        p.blockSignals(False)
        self._update_delete()

    def _update_delete(self) -> None:
        preset = self._store().get(self.preset_picker.currentData() or "")
        self.delete_preset_button.setEnabled(preset is not None and not preset.builtin)

    def _preset_picked(self, _index: int) -> None:
        preset = self._store().get(self.preset_picker.currentData() or "")
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
        match = self._store().matching(self.system.toPlainText())
        self.preset_picker.setCurrentIndex(max(0, self.preset_picker.findData(match.name)) if match else 0)
        self._update_delete()

    def _save_preset(self) -> None:
        name = self.preset_name.text()
        problem = self._store().save(name, self.system.toPlainText(), self.temperature.value(), self.settings())
        self.preset_note.setText(problem or f"Saved as “{' '.join(name.split())}”.")
        self.preset_note.setProperty("error", bool(problem))
        self.preset_note.show()
        if problem is None:
            self.preset_name.clear()
            self._fill_presets(" ".join(name.split()))

    def _delete_preset(self) -> None:
        name = self.preset_picker.currentData() or ""
        if self._store().delete(name):
            self.preset_note.setText(f"Deleted “{name}”.")
            self.preset_note.show()
            self._fill_presets()

    def sampling(self) -> Sampling:
        seed = self.seed.value()
        stop = tuple(_typed(line) for line in self.stop.toPlainText().splitlines() if line)[:MAX_STOPS]
        return Sampling(self.temperature.value(), self.top_p.value(), self.max_tokens.value(),
                        None if seed < 0 else seed, self.top_k.value(), round(self.min_p.value(), 2),
                        round(self.repeat_penalty.value(), 2), stop, self.overflow.currentData())


class ConversationSettingsDialog(QDialog, SettingsFields):
    """A chat's settings in a dialog: OK applies them (``sampling()``, ``system``)."""

    def __init__(self, c: Conversation, parent=None, presets=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Hearth — chat settings")
        form = QFormLayout(self)
        heading = QLabel("Chat settings")
        heading.setObjectName("dialogHeading")
        form.addRow(heading)
        self._add_fields(form, c, presets)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form.addRow(buttons)


class ChatSettingsPanel(QWidget, SettingsFields):
    """A chat's settings beside the conversation: it stays open, shows the open chat's settings
    (``show_chat`` when another chat opens) and says each change once the user pauses
    (``edited``: the system prompt and the sampling), which the chat page applies to the chat."""

    #: the chat's id, its system prompt and its ``Sampling``
    edited = Signal(int, str, object)

    def __init__(self, c: Conversation, presets=None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.conversation_id = c.id
        self.setObjectName("chatSettingsPanel")
        inner = QWidget()
        form = QFormLayout(inner)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapAllRows)  # labels above their fields: a narrow column
        form.setContentsMargins(8, 8, 6, 8)
        heading = QLabel("Chat settings")
        heading.setObjectName("dialogHeading")
        form.addRow(heading)
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(APPLY_AFTER_MS)
        self._loading = True
        self._add_fields(form, c, presets, columns=1)
        self._loading = False
        self.system.setMinimumHeight(80)
        self.system.setMaximumHeight(160)
        for box in (self.overflow, *([self.preset_picker] if presets is not None else [])):
            # a long choice is cut in the box, not a reason for the column to grow
            box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
            box.setMinimumContentsLength(6)
        note = QLabel("Changes apply to this chat as you make them.")
        note.setObjectName("hint")
        note.setWordWrap(True)
        form.addRow(note)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)  # it fits its width
        scroll.setWidget(inner)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setProperty("hearthSplitScroll", True)  # a theme switch restyles its fields part by part
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(scroll)
        # never narrower than its fields (beside a scroll bar): they are cut nowhere
        self.setMinimumWidth(max(PANEL_MIN_WIDTH, inner.minimumSizeHint().width()
                                 + scroll.verticalScrollBar().sizeHint().width() + 4))
        self._timer.timeout.connect(self.apply_now)
        for w in self.fields():
            if isinstance(w, QPlainTextEdit):
                w.textChanged.connect(self._changed)
            elif isinstance(w, QComboBox):
                w.currentIndexChanged.connect(self._changed)
            elif isinstance(w, (QSpinBox, QDoubleSpinBox)):
                w.valueChanged.connect(self._changed)
        if presets is not None:
            self.preset_picker.activated.connect(self._changed)

    def show_chat(self, c: Conversation) -> None:
        """The open chat's settings, without applying them back to it."""
        if self._timer.isActive():
            self.apply_now()  # a pending change belongs to the chat shown until now
        self.conversation_id = c.id
        self._loading = True
        try:
            SettingsFields.show_chat(self, c)
        finally:
            self._loading = False

    def _changed(self, *_args) -> None:
        if not self._loading:
            self._timer.start()

    def apply_now(self) -> None:
        self._timer.stop()
        self.edited.emit(self.conversation_id, self.system.toPlainText(), self.sampling())


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
