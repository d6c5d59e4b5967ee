"""The chat's header: its title, the model that answers in it (chat models only), that model's
capabilities, the chat's context length with the planner's verdict, and the chat's settings.

The header fits any width from 800 px windows up: the title keeps its room and the less
important pieces (the capability badges, then the verdict) step out when they do not fit; their
information stays in the tooltips.
"""

from __future__ import annotations

from PySide6.QtCore import QPointF, Qt, Signal
from PySide6.QtGui import QPainter, QPalette, QPen
from PySide6.QtWidgets import (
    QComboBox, QHBoxLayout, QLabel, QPushButton, QSizePolicy, QSpinBox, QStyle, QStyleOptionComboBox,
    QStyleOptionSpinBox, QStylePainter, QWidget,
)

from app.api_types import AvailableModel
from app.models import capability_badges, is_chat_model
from app.qt_models import format_size
from app.ui.blocks import ElidedLabel, clear_layout
from app.ui.style import badge_style

SERVER_DEFAULT = "Default model"
TITLE_MIN = 90  # px the title keeps before anything else is shown
CTX_TIP = "This chat's context length (the model is loaded at it); the badge says whether it fits this computer"


PICKER_TIP = "The model that answers in this chat"


class ElidedCombo(QComboBox):
    """A combo box whose current text is cut with "…" when it does not fit (the style sheet's
    drawing clips it mid-word instead), its arrow always shown; the tooltip holds the full text."""

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt's name
        painter = QStylePainter(self)
        opt = QStyleOptionComboBox()
        self.initStyleOption(opt)
        painter.drawComplexControl(QStyle.ComplexControl.CC_ComboBox, opt)
        field = self.style().subControlRect(QStyle.ComplexControl.CC_ComboBox, opt,
                                            QStyle.SubControl.SC_ComboBoxEditField, self)
        opt.currentText = self.fontMetrics().elidedText(opt.currentText, Qt.TextElideMode.ElideRight,
                                                        max(0, field.width() - 4))
        painter.drawControl(QStyle.ControlElement.CE_ComboBoxLabel, opt)

    def showPopup(self) -> None:  # noqa: N802 - Qt's name
        """The list as wide as its longest entry (a model's name, loaded state and capabilities),
        not cut to the box's width."""
        view = self.view()
        view.setMinimumWidth(min(view.sizeHintForColumn(0) + 32, 560))
        super().showPopup()


class StepSpin(QSpinBox):
    """A spin box that shows its step arrows: a small chevron up and one down at its right end
    (the style sheet gives the two buttons their room; the app's other spin boxes have none)."""

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().paintEvent(event)
        opt = QStyleOptionSpinBox()
        self.initStyleOption(opt)
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        role = QPalette.ColorRole.PlaceholderText if self.isEnabled() else QPalette.ColorRole.Mid
        pen = QPen(self.palette().color(role), 1.6)
        pen.setCapStyle(Qt.PenCapStyle.RoundCap)
        pen.setJoinStyle(Qt.PenJoinStyle.RoundJoin)
        p.setPen(pen)
        for sub, up in ((QStyle.SubControl.SC_SpinBoxUp, True), (QStyle.SubControl.SC_SpinBoxDown, False)):
            r = self.style().subControlRect(QStyle.ComplexControl.CC_SpinBox, opt, sub, self)
            if r.width() < 6:
                continue
            mid = r.center()
            c = QPointF(mid.x() - 1, mid.y() + (2 if up else -2))  # the pair sits together near the middle
            dy = -1.8 if up else 1.8
            p.drawPolyline([QPointF(c.x() - 3.5, c.y() - dy), QPointF(c.x(), c.y() + dy),
                            QPointF(c.x() + 3.5, c.y() - dy)])
        p.end()


class ChatHeader(QWidget):
    model_picked = Signal(str)  # "" for the service's default
    ctx_changed = Signal()
    settings_requested = Signal()
    list_requested = Signal()  # fold the chat list away, or bring it back

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("chatHeader")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground)  # its border line comes from the style sheet
        self._row = hl = QHBoxLayout(self)
        hl.setContentsMargins(20, 8, 14, 8)
        hl.setSpacing(8)
        self.title = ElidedLabel("New chat")
        self.title.setObjectName("chatTitle")
        self.title.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # long titles are cut
        self.title.setMinimumWidth(TITLE_MIN)
        self.model_picker = ElidedCombo()
        self.model_picker.setMinimumWidth(140)
        self.model_picker.setMaximumWidth(300)
        self.model_picker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.model_picker.setMinimumContentsLength(12)
        self.model_picker.setPlaceholderText("No models: start the server")
        self.model_picker.setToolTip(PICKER_TIP)
        self.model_picker.currentIndexChanged.connect(self._picker_tip)
        self.model_picker.setAccessibleName("Model")
        self.model_picker.activated.connect(lambda i: self.model_picked.emit(self.model_picker.itemData(i) or ""))
        self.badges = QWidget()
        self.badge_row = QHBoxLayout(self.badges)
        self.badge_row.setContentsMargins(0, 0, 0, 0)
        self.badge_row.setSpacing(4)
        self.ctx_spin = StepSpin(minimum=0, maximum=1 << 20, singleStep=1024)
        self.ctx_spin.setSpecialValueText("Context: default")
        self.ctx_spin.setPrefix("Context: ")
        self.ctx_spin.setObjectName("ctxSpin")  # its step arrows show (the style sheet)
        self.ctx_spin.setFixedWidth(150)
        self.ctx_spin.setAccessibleName("Context length")
        self.ctx_spin.setToolTip(CTX_TIP)
        self.ctx_spin.editingFinished.connect(self.ctx_changed)
        self.fit_label = QLabel()
        self.fit_label.setObjectName("fitBadge")
        self.fit_label.hide()
        self.fit_wanted = False  # the verdict has words to show (it may not fit the width)
        self.settings_button = QPushButton("")
        self.settings_button.setObjectName("iconButton")
        self.settings_button.setToolTip("Chat settings beside the conversation: system prompt, sampling, and "
                                        "what is sent when the chat is longer than the context (Ctrl+,)")
        self.settings_button.setAccessibleName("Chat settings")
        self.settings_button.setCheckable(True)  # down while the panel is open
        self.settings_button.clicked.connect(self.settings_requested)
        self.list_button = QPushButton("")
        self.list_button.setObjectName("iconButton")
        self.list_button.setToolTip("Show or hide the list of chats (Ctrl+B)")
        self.list_button.setAccessibleName("Chat list")
        self.list_button.setCheckable(True)  # down while the list shows
        self.list_button.clicked.connect(self.list_requested)
        hl.addWidget(self.list_button)
        hl.addWidget(self.title, 1)
        # what the window's layout may count on: the list button, the title, the picker, the
        # context and the settings; the rest shows when there is room (``_fit_width``)
        self.setMinimumWidth(20 + 14 + 32 + TITLE_MIN + 140 + 150 + 32 + 4 * 8)
        for w in (self.model_picker, self.badges, self.ctx_spin, self.fit_label, self.settings_button):
            hl.addWidget(w)
        self._ids: list[str] = []
        self._default = ""
        self._available: dict[str, AvailableModel] = {}

    # what the picker offers
    def set_models(self, ids: list[str], default: str = "", chosen: str = "") -> None:
        """The chat models the picker offers (embedding and rerank models are left out), the
        service's default first."""
        self._ids, self._default = list(ids), default
        self._fill(chosen)

    def set_available(self, rows: list[AvailableModel]) -> None:
        """``/v1/models`` rows: loaded state, memory and capabilities of each model."""
        self._available = {r["id"]: r for r in rows if r.get("id")}
        self._fill(self.model_picker.currentData() or "")

    def _fill(self, chosen: str) -> None:
        p = self.model_picker
        p.blockSignals(True)
        p.clear()
        p.addItem(f"Default ({self._default})" if self._default else SERVER_DEFAULT, "")
        for mid in self._ids:
            if is_chat_model((self._available.get(mid) or {}).get("capabilities")):
                p.addItem(self._item_text(mid), mid)
        i = p.findData(chosen)
        if i < 0 and chosen:  # the chat's own choice, shown even when it cannot answer here
            why = "not installed" if chosen not in self._ids else "not a chat model"
            p.addItem(f"{chosen} ({why})", chosen)
            i = p.count() - 1
        p.setCurrentIndex(max(i, 0))
        p.blockSignals(False)
        self._picker_tip()
        self.show_badges()

    def _picker_tip(self) -> None:
        """The chosen model's full name in the tooltip: the picker may cut it short."""
        text = self.model_picker.currentText()
        self.model_picker.setToolTip(f"{PICKER_TIP}: {text}" if text else PICKER_TIP)

    def _item_text(self, mid: str) -> str:
        r = self._available.get(mid)
        if r is None:
            return mid
        bits = [mid]
        if r.get("loaded"):
            mem = (r.get("memory") or {}).get("rss_bytes")
            bits.append("● loaded" + (f" · {format_size(mem)}" if mem else ""))
        caps = capability_badges(r.get("capabilities"))
        if caps:
            bits.append(" · ".join(caps))
        return "   ".join(bits)

    def row(self, mid: str) -> AvailableModel | None:
        """What ``/v1/models`` said about a model, if it said anything."""
        return self._available.get(mid)

    def choose(self, mid: str) -> None:
        self._fill(mid)

    def chat_model(self) -> str:
        """The model that answers in this chat: its own choice, or the service's default (when
        the app knows it); "" when the app cannot tell."""
        return self.model_picker.currentData() or self._default

    def show_badges(self) -> None:
        """The capabilities of the chat's model: never those of another model that happens to be loaded."""
        clear_layout(self.badge_row)
        caps = capability_badges((self._available.get(self.chat_model()) or {}).get("capabilities"))
        for cap in caps:
            b = QLabel(cap)
            b.setObjectName("capBadge")
            self.badge_row.addWidget(b)
        self.badges.setToolTip(", ".join(caps))
        self._fit_width()

    def set_fit(self, text: str, colour: str, tooltip: str) -> None:
        self.fit_label.setText(text)
        self.fit_label.setStyleSheet(badge_style(colour))
        self.fit_label.setToolTip(tooltip)
        self.fit_wanted = bool(text)
        self.ctx_spin.setToolTip(CTX_TIP + (f"\n{tooltip}: {text}" if text else ""))  # when the badge has no room
        self._fit_width()

    # the width
    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        self._fit_width()

    def _fit_width(self) -> None:
        """Show the optional pieces that fit beside the title, the most useful first."""
        lay = self._row
        m = lay.contentsMargins()
        room = self.width() - m.left() - m.right() - TITLE_MIN
        fixed: tuple[QWidget, ...] = (self.model_picker, self.ctx_spin, self.settings_button)
        room -= sum(w.sizeHint().width() + lay.spacing() for w in fixed)
        has_badges = self.badge_row.count() > 0
        for w, wanted in ((self.fit_label, self.fit_wanted), (self.badges, has_badges)):
            need = w.sizeHint().width() + lay.spacing()
            show = wanted and need <= room
            if show:
                room -= need
            if w.isVisibleTo(self) != show:
                w.setVisible(show)
