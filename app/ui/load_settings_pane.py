"""A model's load settings: its context length, its layers on the GPU and its KV cache type, as
LM Studio's model settings show them (a tab of the model's settings, ``model_settings_dialog``).

Each is "Automatic" (the service's choice: the fit plan for this machine, ``--ctx``,
``--kv-type``) or a value the user sets. Everything goes through the service (``app.model_settings``,
``/hearth/models/{id}/settings``): Save stores them and the service reloads an idle model with them
on its next request; the pane shows what the model is loaded with now, and the service's reason
when it refuses a value.
"""

from __future__ import annotations

from PySide6.QtWidgets import (
    QComboBox, QFormLayout, QHBoxLayout, QLabel, QPushButton, QSpinBox, QVBoxLayout, QWidget,
)

from app.api_types import ModelLoadSettings
from app.background import Run
from app.errors import ApiProblem
from app.model_settings import ModelSettings

AUTOMATIC = "Automatic"
KV_TYPES = [(AUTOMATIC, None), ("f16 (full precision)", "f16"), ("q8_0 (half the memory)", "q8_0"),
            ("q4_0 (a quarter)", "q4_0")]
APPLIES = "Saved: used from the model's next load (an idle model is reloaded with them)."
#: the contexts offered by the arrows (any value can be typed)
CTX_STEP = 1024


class LoadSettingsPane(QWidget):
    def __init__(self, settings: ModelSettings, model_id: str, run: Run, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.settings, self.model_id, self.run = settings, model_id, run
        lay = QVBoxLayout(self)
        intro = QLabel("How this model is loaded. Automatic leaves it to Hearth, which sizes it for this "
                       "computer; a chat's or a client's own context length still wins.")
        intro.setWordWrap(True)
        form = QFormLayout()
        self.ctx = QSpinBox()
        self.ctx.setRange(0, 1 << 22)
        self.ctx.setSingleStep(CTX_STEP)
        self.ctx.setSpecialValueText(AUTOMATIC)  # shown at 0
        self.ctx.setSuffix(" tokens")
        self.ctx.setAccessibleName("Context length")
        self.gpu_layers = QSpinBox()
        self.gpu_layers.setRange(-1, 1000)
        self.gpu_layers.setSpecialValueText(AUTOMATIC)  # shown at -1
        self.gpu_layers.setAccessibleName("GPU layers")
        self.gpu_layers.setToolTip("Layers kept on the GPU (0: all on the CPU). Automatic: as many as fit.")
        self.kv_type = QComboBox()
        for label, value in KV_TYPES:
            self.kv_type.addItem(label, value)
        self.kv_type.setAccessibleName("KV cache type")
        self.kv_type.setToolTip("How the context's keys and values are stored: smaller types hold a longer "
                                "context in the same memory, at a small cost in quality.")
        form.addRow("&Context length", self.ctx)
        form.addRow("&GPU layers", self.gpu_layers)
        form.addRow("&KV cache type", self.kv_type)
        self.now = QLabel("Reading the settings…")
        self.now.setObjectName("hint")
        self.now.setWordWrap(True)
        self.error = QLabel()
        self.error.setObjectName("errorLabel")
        self.error.setWordWrap(True)
        self.error.hide()
        buttons = QHBoxLayout()
        self.save_button = QPushButton("&Save")
        self.save_button.clicked.connect(lambda: self.run(self.save()))
        self.reset_button = QPushButton("&All automatic")
        self.reset_button.clicked.connect(lambda: self.run(self.reset()))
        buttons.addWidget(self.save_button)
        buttons.addWidget(self.reset_button)
        buttons.addStretch(1)
        lay.addWidget(intro)
        lay.addLayout(form)
        lay.addWidget(self.now)
        lay.addWidget(self.error)
        lay.addLayout(buttons)  # right under the fields they save
        lay.addStretch(1)
        for w in (self.save_button, self.reset_button):
            w.setEnabled(False)

    async def refresh(self) -> None:
        await self._call(self.settings.load_settings(self.model_id))

    def show_settings(self, s: ModelLoadSettings, note: str = "") -> None:
        self.ctx.setValue(s.ctx or 0)
        self.gpu_layers.setValue(-1 if s.gpu_layers is None else s.gpu_layers)
        self.kv_type.setCurrentIndex(max(0, self.kv_type.findData(s.kv_type)))
        if s.loaded:
            now = (f"Loaded now with a context of {s.loaded_ctx:,} tokens, {s.loaded_gpu_layers or 0} layers on "
                   f"the GPU and a {s.loaded_kv_type or 'f16'} KV cache." if s.loaded_ctx else "Loaded now.")
        else:
            now = "Not loaded now."
        self.now.setText(f"{note} {now}".strip())
        self.save_button.setEnabled(True)
        self.reset_button.setEnabled(s.ctx is not None or s.gpu_layers is not None or s.kv_type is not None)

    def values(self) -> tuple[int | None, int | None, str | None]:
        """(context, GPU layers, KV type) as set; None: automatic."""
        ctx = self.ctx.value() or None
        layers = self.gpu_layers.value()
        return ctx, None if layers < 0 else layers, self.kv_type.currentData()

    async def save(self) -> None:
        await self._call(self.settings.store_load_settings(self.model_id, *self.values()), APPLIES)

    async def reset(self) -> None:
        await self._call(self.settings.reset_load_settings(self.model_id), APPLIES)

    async def _call(self, coro, note: str = "") -> None:
        try:
            s = await coro
        except ApiProblem as e:
            self.error.setText(e.message)
            self.error.show()
            return
        self.error.hide()
        self.show_settings(s, note)
