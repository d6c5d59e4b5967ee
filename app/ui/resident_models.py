"""The models resident in the service now: one card each with memory, context, Pin and Unload."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.models import ModelStoreService
from app.qt_models import format_size


class ResidentCard(QFrame):
    def __init__(self, m: dict, models: ModelStoreService, run: Callable) -> None:
        super().__init__()
        self.setObjectName("card")
        self.model = m
        lay = QHBoxLayout(self)
        lay.setContentsMargins(14, 10, 10, 10)
        text = QVBoxLayout()
        text.setSpacing(2)
        self.name = QLabel(m.get("id", "?"))
        self.name.setObjectName("modelName")
        bits = []
        if m.get("memory_bytes"):
            bits.append(f"{format_size(m['memory_bytes'])} in memory")
        if m.get("n_ctx"):
            bits.append(f"{m['n_ctx']:,} tokens of context")
        if m.get("active"):
            bits.append(f"{m['active']} answering")
        if m.get("expires_at") and not m.get("pinned"):
            bits.append("unloads when idle (keep-alive)")
        self.detail = QLabel(" · ".join(bits))
        self.detail.setObjectName("modelDetail")
        text.addWidget(self.name)
        text.addWidget(self.detail)
        lay.addLayout(text, 1)
        from app.models import capability_badges

        row = next((r for r in models.available if r.get("id") == m.get("id")), None)
        for cap in capability_badges(row.get("capabilities") if row is not None else None):
            b = QLabel(cap)
            b.setObjectName("capBadge")
            lay.addWidget(b)
        self.pinned = QLabel("Pinned")
        self.pinned.setObjectName("pinBadge")
        self.pinned.setVisible(bool(m.get("pinned")))
        self.pin_button = QPushButton("Unpin" if m.get("pinned") else "Pin")
        self.pin_button.setToolTip("A pinned model is never unloaded to make room for another, nor when idle.")
        self.pin_button.clicked.connect(lambda: run(models.load(m["id"], pin=not m.get("pinned"))))
        self.unload_button = QPushButton("Unload")
        self.unload_button.clicked.connect(lambda: run(models.unload_model(m["id"])))
        lay.addWidget(self.pinned)
        lay.addWidget(self.pin_button)
        lay.addWidget(self.unload_button)


class ResidentList(QWidget):
    def __init__(self, models: ModelStoreService, run: Callable) -> None:
        super().__init__()
        self.models, self.run = models, run
        self.lay = QVBoxLayout(self)
        self.lay.setContentsMargins(0, 0, 0, 0)
        self.lay.setSpacing(6)
        self.cards: list[ResidentCard] = []
        models.residents_changed.connect(self.refresh)
        self.refresh(models.residents)

    def refresh(self, residents: list[dict]) -> None:
        for c in self.cards:
            self.lay.removeWidget(c)
            c.deleteLater()
        self.cards = [ResidentCard(m, self.models, self.run) for m in residents]
        for c in self.cards:
            self.lay.addWidget(c)
