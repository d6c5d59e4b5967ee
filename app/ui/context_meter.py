"""The context meter under the message box: how full the chat's context is, and a warning
before it overflows."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QWidget

from app.context_use import ContextUse


class ContextMeter(QWidget):
    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("contextMeter")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(6)
        self.bar = QProgressBar()
        self.bar.setObjectName("contextBar")
        self.bar.setTextVisible(False)
        self.bar.setFixedSize(56, 6)
        self.bar.setRange(0, 1000)
        self.label = QLabel()
        self.label.setObjectName("statsLabel")
        lay.addWidget(self.bar)
        lay.addWidget(self.label)
        self.use: ContextUse | None = None

    def show_use(self, use: ContextUse) -> None:
        self.use = use
        about = "" if use.counted else "≈ "
        if not use.limit:
            self.label.setText(f"{about}{use.used:,} tokens")
            self.bar.hide()
            self.setToolTip("Tokens this chat sends with the next message (the model's context length is not known).")
        else:
            share = use.used / use.limit
            self.bar.show()
            self.bar.setValue(min(1000, int(share * 1000)))
            state = ("  · almost full" if use.warn and share < 1 else "  · full" if share >= 1 else "")
            if use.dropped:
                state = f"  · {use.dropped:,} older message{'s' if use.dropped != 1 else ''} left out"
            self.label.setText(f"{about}{use.used:,} / {use.limit:,}{state}")
            if use.dropped:
                self.setToolTip(f"This chat is longer than the model's context: {use.dropped:,} older messages are "
                                f"left out of what is sent ({use.used:,} tokens go). Change it in the chat settings, "
                                "start a new chat, or raise the context (the field at the top).")
            else:
                self.setToolTip(f"This chat's context: {share:.0%} used. When it is full, older messages are left "
                                "out (or the chat stops, as its settings say): start a new chat, or raise the "
                                "context (the field at the top).")
        self.setProperty("warn", use.warn)
        for w in (self.label, self.bar, self):
            w.setProperty("warn", use.warn)
            w.style().unpolish(w)
            w.style().polish(w)
