"""The tray icon: the service's state at a glance, and a menu to open, start/stop and quit."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QRectF, Qt
from PySide6.QtGui import QAction, QColor, QIcon, QPainter, QPixmap
from PySide6.QtWidgets import QMenu, QSystemTrayIcon

from app.service import RUNNING, STARTING, ServiceController

STATE_COLOURS = {RUNNING: "#3fb950", STARTING: "#d29922", "checking": "#d29922"}
ERROR_COLOUR, IDLE_COLOUR = "#f85149", "#8b949e"


def state_icon(state: str, size: int = 64) -> QIcon:
    """A flame-coloured disc with a dot in the service's state colour."""
    pix = QPixmap(size, size)
    pix.fill(Qt.GlobalColor.transparent)
    p = QPainter(pix)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(QColor("#e8773a"))
    p.drawEllipse(QRectF(2, 2, size - 4, size - 4))
    p.setBrush(QColor("#fff3e0"))
    p.drawEllipse(QRectF(size * 0.3, size * 0.3, size * 0.4, size * 0.4))
    colour = STATE_COLOURS.get(state, ERROR_COLOUR if state in ("died", "unreachable", "foreign") else IDLE_COLOUR)
    p.setBrush(QColor(colour))
    p.setPen(QColor("#ffffff"))
    d = size * 0.38
    p.drawEllipse(QRectF(size - d - 1, size - d - 1, d, d))
    p.end()
    return QIcon(pix)


class Tray(QObject):
    def __init__(self, service: ServiceController, *, open_window: Callable[[], None],
                 start: Callable[[], object], stop: Callable[[], object], quit: Callable[[], None]) -> None:
        super().__init__()
        self.service = service
        self.available = QSystemTrayIcon.isSystemTrayAvailable()
        self.icon = QSystemTrayIcon(state_icon(service.state))
        self.menu = QMenu()
        self.open_action = self.menu.addAction("Open Hearth", open_window)
        self.model_action = self.menu.addAction("No model loaded")
        self.model_action.setEnabled(False)
        self.menu.addSeparator()
        self.start_action = self.menu.addAction("Start server", start)
        self.stop_action = self.menu.addAction("Stop server", stop)
        self.menu.addSeparator()
        self.quit_action: QAction = self.menu.addAction("Quit Hearth", quit)
        self.icon.setContextMenu(self.menu)
        self.icon.activated.connect(lambda reason: open_window()
                                    if reason == QSystemTrayIcon.ActivationReason.Trigger else None)
        service.state_changed.connect(lambda _: self.refresh())
        service.health_changed.connect(lambda _: self.refresh())
        self.refresh()
        if self.available:
            self.icon.show()

    def refresh(self) -> None:
        s = self.service
        self.icon.setIcon(state_icon(s.state))
        model = s.loaded_model
        self.model_action.setText(f"{'Models' if ',' in (model or '') else 'Model'}: {model}" if model
                                  else "No model loaded")
        self.icon.setToolTip(f"Hearth — {s.state}" + (f" — {model}" if model else ""))
        self.start_action.setEnabled(s.state not in (RUNNING, STARTING))
        self.stop_action.setEnabled(s.owned)

    def hide(self) -> None:
        self.icon.hide()
