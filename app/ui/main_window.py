"""The main window: navigation, pages, a banner for problems, a status line."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QFrame, QHBoxLayout, QLabel, QListWidget, QMainWindow, QPushButton, QStackedWidget, QVBoxLayout, QWidget,
)

from app.errors import UserError


class Banner(QFrame):
    """One problem at a time, in plain words, with a button that does something about it."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("banner")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(14, 8, 8, 8)
        self.label = QLabel()
        self.label.setObjectName("bannerText")
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.action = QPushButton()
        self.close_button = QPushButton("Dismiss")
        self.close_button.setFlat(True)
        self.close_button.clicked.connect(self.hide)
        lay.addWidget(self.label, 1)
        lay.addWidget(self.action)
        lay.addWidget(self.close_button)
        self._callback: Callable[[], None] | None = None
        self.action.clicked.connect(self._act)
        self.problem: UserError | None = None
        self.hide()

    def show_problem(self, problem: UserError | None, action: str = "", callback: Callable[[], None] | None = None):
        self.problem = problem
        if problem is None:
            self.hide()
            return
        self.label.setText(f"<b>{problem.title}</b> {problem.detail} {problem.action}")
        self._callback = callback
        self.action.setText(action)
        self.action.setVisible(bool(action and callback))
        self.show()

    def _act(self) -> None:
        if self._callback is not None:
            self._callback()


class MainWindow(QMainWindow):

    PAGES = ("Chat", "Models", "Server", "Settings")

    def __init__(self, pages: dict[str, QWidget], title: str = "Hearth") -> None:
        super().__init__()
        self.setWindowTitle(title)
        self.resize(1180, 760)
        self.pages = pages
        self.nav = QListWidget()
        self.nav.setObjectName("nav")
        self.nav.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.nav.setIconSize(QSize(18, 18))
        self.stack = QStackedWidget()
        for name in self.PAGES:
            if name in pages:
                self.nav.addItem(name)
                self.stack.addWidget(pages[name])
        self.nav.currentRowChanged.connect(self._nav_changed)
        self.banner = Banner()
        body = QWidget()
        bl = QHBoxLayout(body)
        bl.setContentsMargins(0, 0, 0, 0)
        bl.setSpacing(0)
        rail = QWidget()
        rail.setFixedWidth(188)
        rl_ = QVBoxLayout(rail)
        rl_.setContentsMargins(0, 0, 0, 0)
        rl_.setSpacing(0)
        brand = QLabel("🔥  Hearth")
        brand.setObjectName("brand")
        self.nav_footer = QLabel("Runs on this computer.\nNothing leaves it.")
        self.nav_footer.setObjectName("navFooter")
        rl_.addWidget(brand)
        rl_.addWidget(self.nav, 1)
        rl_.addWidget(self.nav_footer)
        bl.addWidget(rail)
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.setSpacing(0)
        rl.addWidget(self.banner)
        rl.addWidget(self.stack, 1)
        bl.addWidget(right, 1)
        self.setCentralWidget(body)
        self.service_label = QLabel()
        self.statusBar().addPermanentWidget(self.service_label)
        self.nav.setCurrentRow(0)
        self.close_handler: Callable[[], bool] | None = None

    ICONS = {"Chat": "chat", "Models": "models", "Server": "server", "Settings": "settings"}

    def retheme(self, theme) -> None:
        """Icons in the theme's colours; pages that draw colours of their own follow."""
        from app.ui.icons import icon

        for i in range(self.nav.count()):
            item = self.nav.item(i)
            name = self.ICONS.get(item.text())
            if name:
                item.setIcon(icon(name, theme.muted if i != self.nav.currentRow() else theme.accent))
        self._theme = theme
        for page in self.pages.values():
            if hasattr(page, "retheme"):
                page.retheme(theme)

    def _nav_changed(self, row: int) -> None:
        self.stack.setCurrentIndex(row)
        if getattr(self, "_theme", None) is not None:
            self.retheme(self._theme)

    def show_page(self, name: str) -> None:
        names = [self.nav.item(i).text() for i in range(self.nav.count())]
        if name in names:
            self.nav.setCurrentRow(names.index(name))

    def set_service_text(self, text: str) -> None:
        self.service_label.setText(text)

    def closeEvent(self, event: QCloseEvent) -> None:
        """The composition root decides: hide to the tray, or quit."""
        if self.close_handler is not None and not self.close_handler():
            event.ignore()
            self.hide()
            return
        event.accept()
