"""A model's settings, in one dialog with a tab for each: how it is loaded (``load_settings_pane``)
and the chat template it renders with (``template_pane``)."""

from __future__ import annotations

from PySide6.QtWidgets import QDialog, QHBoxLayout, QLabel, QPushButton, QTabWidget, QVBoxLayout, QWidget

from app.background import Run
from app.model_settings import ModelSettings
from app.ui.load_settings_pane import LoadSettingsPane
from app.ui.template_pane import TemplatePane


class ModelSettingsDialog(QDialog):
    def __init__(self, settings: ModelSettings, model_id: str, name: str, run: Run,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Model settings · {name}")
        self.resize(720, 520)
        self.load = LoadSettingsPane(settings, model_id, run)
        self.template = TemplatePane(settings, model_id, run)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.load, "&Load")
        self.tabs.addTab(self.template, "Chat &template")
        close = QPushButton("Close")
        close.clicked.connect(self.accept)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(close)
        heading = QLabel(name)
        heading.setObjectName("dialogHeading")
        what = QLabel(model_id if model_id != name else "")
        what.setObjectName("hint")
        what.setVisible(bool(what.text()))
        lay = QVBoxLayout(self)
        lay.setContentsMargins(20, 16, 20, 14)
        lay.addWidget(heading)
        lay.addWidget(what)
        lay.addWidget(self.tabs, 1)
        lay.addLayout(row)

    async def refresh(self) -> None:
        await self.load.refresh()
        await self.template.refresh()
