"""The main window: navigation, pages, a banner for problems, a status line."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QCloseEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QFrame, QHBoxLayout, QLabel, QListWidget, QListWidgetItem, QMainWindow, QPushButton, QStackedWidget, QVBoxLayout,
    QWidget,
)

from app.errors import UserError

if TYPE_CHECKING:
    from app.ui.style import Theme


def _sentence(text: str) -> str:
    """A piece of a message as a sentence: trimmed, ending in a full stop (details that come from
    elsewhere, an exception's text, often end without one and ran into the next sentence)."""
    text = " ".join(text.split())
    return text if not text or text[-1] in ".!?:)" else text + "."


def banner_html(problem: UserError) -> str:
    """The title in bold, what happened, and what to do on a line of its own."""
    parts = [f"<b>{html.escape(_sentence(problem.title))}</b>"]
    if problem.detail.strip():
        parts.append(html.escape(_sentence(problem.detail)))
    out = " ".join(parts)
    if problem.action.strip():
        out += "<br>" + html.escape(_sentence(problem.action))
    return out


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
        self._callback: Callable[[], object] | None = None
        self.action.clicked.connect(self._act)
        self.problem: UserError | None = None
        self.hide()

    def show_problem(self, problem: UserError | None, action: str = "",
                     callback: Callable[[], object] | None = None) -> None:
        self.problem = problem
        if problem is None:
            self.hide()
            return
        self.label.setText(banner_html(problem))
        self._callback = callback
        self.action.setText(action)
        self.action.setVisible(bool(action and callback))
        self.show()

    def _act(self) -> None:
        if self._callback is not None:
            self._callback()


#: the navigation rail's width with page names, and with icons only (windows narrower than
#: ``COMPACT_BELOW``: an 800 px window keeps its room for the page)
RAIL_WIDE, RAIL_NARROW, COMPACT_BELOW = 188, 60, 1000
MIN_WIDTH, MIN_HEIGHT = 800, 560


class MainWindow(QMainWindow):

    PAGES = ("Chat", "Models", "Server", "Settings")

    def __init__(self, pages: dict[str, QWidget], title: str = "Hearth",
                 rethemers: Sequence[Callable[[Theme], None]] = ()) -> None:
        """``rethemers``: what draws in the theme's colours besides the sheet (icons), called
        with the new theme after a switch."""
        super().__init__()
        self.setWindowTitle(title)
        self.resize(1180, 760)
        self.pages = pages
        self.rethemers = list(rethemers)
        self._theme: Theme | None = None  #: the theme the icons are drawn in (``retheme``)
        self.nav = QListWidget()
        self.nav.setObjectName("nav")
        self.nav.setAccessibleName("Pages")
        self.nav.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # Tab reaches it; the arrows change the page
        self.nav.setIconSize(QSize(18, 18))
        self.nav.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.stack = QStackedWidget()
        for i, name in enumerate(n for n in self.PAGES if n in pages):
            item = QListWidgetItem(name)
            item.setData(Qt.ItemDataRole.UserRole, name)
            item.setToolTip(f"{name} (Ctrl+{i + 1})")
            self.nav.addItem(item)
            self.stack.addWidget(pages[name])
            QShortcut(QKeySequence(f"Ctrl+{i + 1}"), self).activated.connect(lambda n=name: self.show_page(n))
        QShortcut(QKeySequence("Ctrl+Q"), self).activated.connect(self._quit)
        self.nav.currentRowChanged.connect(self._nav_changed)
        self.banner = Banner()
        body = QWidget()
        bl = QHBoxLayout(body)
        bl.setContentsMargins(0, 0, 0, 0)
        bl.setSpacing(0)
        self.rail = rail = QWidget()
        rail.setObjectName("rail")
        rail.setFixedWidth(RAIL_WIDE)
        rl_ = QVBoxLayout(rail)
        rl_.setContentsMargins(0, 0, 0, 0)
        rl_.setSpacing(0)
        self.brand = brand = QLabel()
        brand.setObjectName("brand")
        brand.setTextFormat(Qt.TextFormat.RichText)
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
        self.quit_handler: Callable[[], None] | None = None
        self.compact = False
        self._set_compact(False)
        # an 800x600 screen holds the window: the rail folds to icons below COMPACT_BELOW, and the
        # pages fit the rest (the layout's own minimum counts the wide rail)
        self.setMinimumSize(MIN_WIDTH, MIN_HEIGHT)

    ICONS = {"Chat": "chat", "Models": "models", "Server": "server", "Settings": "settings"}

    def _quit(self) -> None:
        if self.quit_handler is not None:
            self.quit_handler()

    def _set_compact(self, compact: bool) -> None:
        """The navigation rail as icons only (narrow windows) or icons with names."""
        self.compact = compact
        self.rail.setFixedWidth(RAIL_NARROW if compact else RAIL_WIDE)
        for i in range(self.nav.count()):
            item = self.nav.item(i)
            item.setText("" if compact else item.data(Qt.ItemDataRole.UserRole))
        from app.icons import icon_path

        logo = icon_path(24).as_posix()
        self.brand.setText(f"<img src='{logo}' width='22' height='22' style='vertical-align: middle'>"
                           + ("" if compact else "&nbsp;&nbsp;Hearth"))
        self.brand.setToolTip("Hearth")
        self.brand.setProperty("compact", compact)
        self.brand.setAlignment(Qt.AlignmentFlag.AlignHCenter if compact else Qt.AlignmentFlag.AlignLeft)
        self.brand.style().unpolish(self.brand)
        self.brand.style().polish(self.brand)
        self.nav_footer.setVisible(not compact)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        compact = self.width() < COMPACT_BELOW
        if compact != self.compact:
            self._set_compact(compact)

    def retheme(self, theme: Theme) -> None:
        """Icons in the theme's colours; pages that draw colours of their own follow."""
        from app.ui.icons import icon

        for i in range(self.nav.count()):
            item = self.nav.item(i)
            name = self.ICONS.get(item.data(Qt.ItemDataRole.UserRole))
            if name:
                item.setIcon(icon(name, theme.muted if i != self.nav.currentRow() else theme.accent))
        self._theme = theme
        for retheme in self.rethemers:
            retheme(theme)

    def _nav_changed(self, row: int) -> None:
        self.stack.setCurrentIndex(row)
        if self._theme is not None:
            self.retheme(self._theme)

    def show_page(self, name: str) -> None:
        names = [self.nav.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.nav.count())]
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
