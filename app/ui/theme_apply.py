"""Switching theme without freezing the window: the style sheet goes onto parts of the window
(the rail, the banner, the status bar, each page or a page's parts), a part per turn of the event
loop, the visible ones first, instead of onto the application at once.

A new application style sheet restyles every widget of every page in one pass (a third of a
second here, however little is on screen). Per part, each pass is a few dozen widgets; a hidden
page that still has the old sheet gets the new one the moment it is shown. The palette changes at
once (it is cheap), so what the sheets do not reach (menus, the window's background) follows
straight away; a window that opens later (a dialog, a message box) gets the sheet as it shows.
A widget that was shown on its own (a window for a moment, so it got the sheet of its own) and
is then put inside the window gives that sheet back: it follows its new parent's from then on,
where a sheet of its own would keep the theme it was shown in.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QAbstractSpinBox, QApplication, QScrollArea, QSplitter, QStackedWidget, QTabWidget, QWidget

#: the most widgets one part may hold: a part is styled in one pass of the loop
PART_WIDGETS = 30
#: containers that draw nothing of their own under the style sheet: a large one is styled by its
#: children instead (its own background is the palette's window colour, the same as the sheet's)
_PLAIN = (QWidget, QStackedWidget, QTabWidget, QSplitter)
#: the property that marks a frameless scroll area whose content may be styled part by part
#: (the scroll area itself then keeps the palette's colours)
_SPLIT_SCROLL = "hearthSplitScroll"
#: where a spin box's text starts inside its frame (a line edit's text is padded by the sheet)
SPIN_TEXT_INSET = 6
#: the property that marks a widget styled as it showed as a window of its own
_AS_WINDOW = "hearthStyledAsWindow"
#: one step of a restyling: (the page or None for the window's own, a part), or (None, a step of its own)
_Step = tuple[QWidget | None, QWidget | Callable[[], None]]


def split_parts(w: QWidget, sheet: str, limit: int = PART_WIDGETS, cut: list[QWidget] | None = None) -> list[QWidget]:
    """``w`` as parts of at most ``limit`` widgets where it can be cut: a plain container whose
    name the sheet does not style is replaced by its children; anything else stays whole. The
    containers that were cut go into ``cut``: they take no sheet, so their colours are the
    palette's."""
    if len(w.findChildren(QWidget)) < limit:
        return [w]
    qt_class = next(c for c in type(w).__mro__ if c.__module__.startswith("PySide6"))
    named = w.objectName() and f"#{w.objectName()}" in sheet
    content = w.widget() if isinstance(w, QScrollArea) and not named and w.property(_SPLIT_SCROLL) else None
    if content is not None:  # a frameless column: its content, part by part
        return split_parts(content, sheet, limit, cut)
    if qt_class not in _PLAIN or named:
        return [w]
    if cut is not None:
        cut.append(w)
    out = []
    for child in w.children():
        if isinstance(child, QWidget) and not child.isWindow():
            out += split_parts(child, sheet, limit, cut)
    return out


def _follow_palette(w: QWidget) -> None:
    """A container cut into parts may keep the palette a sheet gave it in an earlier theme (when
    it was small enough to be styled whole, or under a styled parent): it inherits again."""
    if w.styleSheet():
        w.setStyleSheet("")
    if w.palette().window().color() != QApplication.palette(w).window().color():
        w.setPalette(QPalette())


class ThemeApplier(QObject):
    """``parts()`` names the styled parts: (page or None for the window's own, widget) pairs;
    each is cut further by ``split_parts``. A container cut into its children relies on the
    palette alone."""

    def __init__(self, qapp: QApplication, window, parts: Callable[[], list[tuple[QWidget | None, QWidget]]]) -> None:
        super().__init__()
        self.qapp, self.window, self.parts = qapp, window, parts
        self.sheet = ""
        self.extra: Callable[[], None] | None = None  # restyling of its own after the sheets (icons)
        self._pending: list[_Step] = []  #: what is left to style
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self._next)
        window.stack.currentChanged.connect(self._page_shown)
        qapp.installEventFilter(self)

    def apply(self, sheet: str, at_once: bool = False, then: Callable[[], None] | None = None) -> None:
        """Style every part with ``sheet``: now (``at_once``: the first time, before the window
        shows), else the visible parts first, one per turn of the loop; ``then`` runs in its own
        turn once the visible parts are styled (the icons in the new colours)."""
        self.sheet = sheet
        current = self.window.stack.currentWidget()
        parts: list[_Step] = []
        for page, w in self.parts():
            cut: list[QWidget] = []
            pieces = split_parts(w, sheet, cut=cut)
            parts += [(page, lambda c=c: _follow_palette(c)) for c in cut] + [(page, part) for part in pieces]
        order = sorted(parts, key=lambda pw: 0 if pw[0] is None else 1 if pw[0] is current else 2)
        visible = sum(1 for pw in order if pw[0] is None or pw[0] is current)
        own: list[_Step] = [(None, then)] if then is not None else []
        self._pending = order[:visible] + own + order[visible:]
        if at_once:
            while self._pending:
                self._style(*self._pending.pop(0))
        else:
            self._timer.start(0)

    def pending(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        """Stop styling and leave the application's events alone (the window is going away: an
        application-wide filter left behind would see every event of every later window)."""
        self._timer.stop()
        self._pending.clear()
        self.qapp.removeEventFilter(self)

    def _style(self, page: QWidget | None, w: QWidget | Callable[[], None]) -> None:
        if not isinstance(w, QWidget):
            w()  # a step of its own
        elif w.styleSheet() != self.sheet:
            w.setStyleSheet(self.sheet)
            _inset_spins(w)

    def _next(self) -> None:
        if self._pending:
            self._style(*self._pending.pop(0))
        if self._pending:
            self._timer.start(0)

    def _page_shown(self, _index: int) -> None:
        page = self.window.stack.currentWidget()
        for pw in [pw for pw in self._pending if pw[0] is page]:
            self._pending.remove(pw)
            self._style(*pw)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        kind = event.type()
        # a style sheet's padding does not reach a spin box's text (it sat against the border):
        # the same inset as a line edit's, once, as the box is polished
        if kind == QEvent.Type.Polish and isinstance(obj, QAbstractSpinBox):  # one made after the styling
            _inset(obj)
        # a window that opens outside the styled parts (a dialog of the chat page, a message box)
        if kind == QEvent.Type.Show and isinstance(obj, QWidget) and obj.isWindow() \
                and obj is not self.window and self.sheet and obj.styleSheet() != self.sheet \
                and not _under_styled(obj, self.sheet):
            obj.setStyleSheet(self.sheet)
            obj.setProperty(_AS_WINDOW, True)
            _inset_spins(obj)
        # a widget styled as a window of its own, now inside another: it inherits from there
        elif kind == QEvent.Type.ParentChange and isinstance(obj, QWidget) and not obj.isWindow() \
                and obj.property(_AS_WINDOW):
            obj.setProperty(_AS_WINDOW, None)
            obj.setStyleSheet("")
        return False


def _inset(box: QAbstractSpinBox) -> None:
    edit = box.lineEdit()
    if edit is not None and edit.textMargins().left() == 0:
        edit.setTextMargins(SPIN_TEXT_INSET, 0, 0, 0)


def _inset_spins(w: QWidget) -> None:
    """A style sheet's padding does not reach a spin box's text (it sat against the frame): the
    spin boxes of a part just styled get the inset of a line edit's text."""
    for box in ([w] if isinstance(w, QAbstractSpinBox) else []) + w.findChildren(QAbstractSpinBox):
        _inset(box)


def _under_styled(w: QWidget, sheet: str) -> bool:
    p = w.parentWidget()
    while p is not None:
        if p.styleSheet() == sheet:
            return True
        p = p.parentWidget()
    return False
