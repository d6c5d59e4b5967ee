"""A model's chat template: shown read-only, replaced by a file the user chooses, or reset (a
tab of the model's settings, ``model_settings_dialog``).

Everything goes through the service (``app.model_settings``): the pane reads the template in
effect, sends a chosen file's text, and shows the service's reason when it refuses one.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from app.api_types import ModelTemplate
from app.background import Run
from app.errors import ApiProblem
from app.model_settings import ModelSettings


ORIGINS = {
    "model": "The model's own template, from its file.",
    "stored": "A template you loaded replaces the model's own.",
    "file": "The service was started with --chat-template-file, which replaces this model's template.",
}
NO_TEMPLATE = ("This model has no chat template: Hearth writes the conversation as plain “User: …” and "
               "“Assistant: …” lines. Load a template if the model was trained with one.")
APPLIES = "It is used from the model's next load (an idle model is reloaded with it)."


class TemplatePane(QWidget):
    def __init__(self, templates: ModelSettings, model_id: str, run: Run, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.templates, self.model_id, self.run = templates, model_id, run
        lay = QVBoxLayout(self)
        self.origin = QLabel("Reading the template…")
        self.origin.setWordWrap(True)
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.error = QLabel()
        self.error.setObjectName("errorLabel")
        self.error.setWordWrap(True)
        self.error.hide()
        buttons = QHBoxLayout()
        self.load_button = QPushButton("Load a template file…")
        self.load_button.setToolTip("Use a Jinja chat template file instead of the model's own "
                                    "(hearth template MODEL --template FILE shows the prompt it makes).")
        self.load_button.clicked.connect(self.choose_file)
        self.reset_button = QPushButton("Use the model's own")
        self.reset_button.clicked.connect(lambda: self.run(self.reset()))
        buttons.addWidget(self.load_button)
        buttons.addWidget(self.reset_button)
        buttons.addStretch(1)
        lay.addWidget(self.origin)
        lay.addWidget(self.text, 1)
        lay.addWidget(self.error)
        lay.addLayout(buttons)
        self.reset_button.setEnabled(False)
        self.load_button.setEnabled(False)

    async def refresh(self) -> None:
        await self._call(self.templates.get(self.model_id))

    def show_template(self, t: ModelTemplate, note: str = "") -> None:
        self.text.setPlainText(t.template or "")
        words = ORIGINS.get(t.origin, "") if t.template is not None else NO_TEMPLATE
        self.origin.setText(f"{words} {note}".strip())
        self.reset_button.setEnabled(t.origin == "stored")
        self.load_button.setEnabled(True)

    def show_error(self, message: str) -> None:
        self.error.setText(message)
        self.error.setVisible(bool(message))

    def choose_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Load a chat template", "",
                                              "Jinja templates (*.jinja *.j2 *.jinja2 *.txt);;All files (*)")
        if path:
            self.run(self.load_file(path))

    async def load_file(self, path: str) -> None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            self.show_error(f"{Path(path).name} cannot be read as text: {e}")
            return
        await self._call(self.templates.replace(self.model_id, text), APPLIES)

    async def reset(self) -> None:
        await self._call(self.templates.reset(self.model_id), APPLIES)

    async def _call(self, coro, note: str = "") -> None:
        try:
            t = await coro
        except ApiProblem as e:
            self.show_error(e.message)
            return
        self.show_error("")
        self.show_template(t, note)
