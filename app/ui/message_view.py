"""The message list of one conversation, bound to ``MessageListModel``: only the messages on
screen (and a screen above and below) exist as widgets.

A widget per message, all built up front, froze the window for tens of seconds on a 300-message
chat. Here each row has a height: measured once its widget has been built at the column's width,
estimated from its text before that. The rows' tops are the running sum of the heights; the
scroll bar's range is their total; scrolling builds the rows that come into view and places them,
and a row whose measured height differs from its estimate keeps the row under the top of the
view where it was (no jump). Widgets far from the view are deleted, so a long chat costs the
memory of a few screens. ``bench/message_view.py`` measures the time to first paint and the
longest block while scrolling a 1,000-message chat.
"""

from __future__ import annotations

import bisect
import itertools
import time

import shiboken6

from PySide6.QtCore import QEvent, QModelIndex, QObject, Qt, QTimer, Signal
from PySide6.QtGui import QFontMetrics, QKeyEvent
from PySide6.QtWidgets import QAbstractScrollArea, QFrame, QLabel

from app.conversations import Message
from app.qt_models import MessageListModel
from app.ui.message_widget import MessageWidget, stats_line  # noqa: F401 - both are the view's

EMPTY = ("<div style='font-size:22px; font-weight:700'>Start a conversation</div>"
         "<p>Type below and press <b>Enter</b> to send (<b>Shift+Enter</b> starts a new line). The answer "
         "comes from a model on this computer; nothing leaves it.</p>"
         "<p>Pick a model at the top · attach documents with the paper clip · tools of MCP servers "
         "(Settings → MCP servers) are offered to the model, and each call asks you first.</p>"
         "<p style='font-size:12px'>Ctrl+N new chat · Ctrl+F search · Ctrl+L composer · Esc stop · "
         "Ctrl+R regenerate · Ctrl+Shift+C copy the answer · Ctrl+1–4 pages</p>")

MARGIN_X, MARGIN_Y, SPACING, MAX_COLUMN = 24, 16, 14, 900
#: widgets kept alive beyond the ones on screen (the nearest first): scrolling back is free
KEEP = 16
#: the longest one pass may spend building widgets; the rest of the screen is built on the next
#: turns of the event loop (a jump to an unseen part of a long chat fills in over a few frames)
BUILD_BUDGET_S = 0.012
DROP_PER_PASS = 4
#: rows past each edge of the screen built ahead, one per idle moment
AHEAD = 3
AHEAD_DELAY_MS = 15  # after the screen's own work and its paint


def estimate_height(m: Message, width: int, line: int, char: float) -> int:
    """A message's height before its widget exists: its text's lines at the column's width, code
    lines one each, plus the role line, the numbers and the buttons."""
    per_line = max(10, int((width - 2 * 14) / max(char, 1.0)))
    lines, fenced = 0, False
    for para in m.content.split("\n"):
        if para.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
            lines += 2
            continue
        lines += 1 if fenced else max(1, -(-len(para) // per_line))
    extra = 22 * len(m.meta.get("tool_calls") or ()) + (24 if m.meta.get("reasoning") else 0)
    return 20 + 20 + lines * line + (18 if m.role == "assistant" else 0) + 28 + extra


class MessageView(QAbstractScrollArea):
    """Shows the rows of a ``MessageListModel``; follows the bottom while an answer streams."""

    edit_submitted = Signal(int, str)
    regenerate_requested = Signal()
    citation_clicked = Signal(dict)
    variant_requested = Signal(int, int)  # message id, step (-1 older, +1 newer)

    def __init__(self, model: MessageListModel) -> None:
        super().__init__()
        self.model = model
        self.busy = False
        self.setObjectName("messageView")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # PageUp/PageDown/Home/End scroll it
        self.viewport().setObjectName("messageColumn")
        self.empty = QLabel(EMPTY, self.viewport())
        self.empty.setObjectName("emptyState")
        self.empty.setTextFormat(Qt.TextFormat.RichText)
        self.empty.setWordWrap(True)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self._ids: list[int] = []          # message id per row, kept in step with the model
        self._heights: list[int] = []      # per row: measured, or estimated until built
        self._measured: list[bool] = []
        self._tops: list[int] = []         # y of each row in the column
        self._widgets: dict[int, MessageWidget] = {}  # message id -> its widget, while it lives
        self._dirty: set[int] = set()  # message ids whose widgets asked for a new layout
        self._col_width = 0
        self._follow = True
        self._hold = False  # rows inserted now replace others (a version flipped): no following
        self._placing = False
        # the work left for later, one piece per turn of the event loop (several timers due
        # together would run back to back, one long block): measure widgets that asked for a
        # new layout, build the rows a pass had no time for, build the rows just off screen
        self._work = QTimer(self)
        self._work.setSingleShot(True)
        self._work.timeout.connect(self._do_work)
        self._build_cost = 0.008  # seconds one widget takes to build, a running average
        from app.ui.highlight import warm_up

        warm_up()
        self.verticalScrollBar().valueChanged.connect(self._scrolled)
        model.modelReset.connect(self._reset)
        model.rowsInserted.connect(self._inserted)
        model.rowsRemoved.connect(self._removed)
        model.dataChanged.connect(self._changed)
        self._reset()

    # what the chat page and the tests use
    @property
    def widgets(self) -> list[MessageWidget]:
        """The widgets that exist now, in row order (only those near the view: see ``widget_at``)."""
        return [self._widgets[i] for i in self._ids if i in self._widgets]

    def widget_at(self, row: int) -> MessageWidget:
        """The widget of ``row`` (negative counts from the end), built if it is not."""
        row = range(len(self._ids))[row]
        w = self._widgets.get(self._ids[row]) or self._build(row)
        self._place()
        return w

    def scroll_to_row(self, row: int) -> None:
        row = range(len(self._ids))[row]
        self._follow = row == len(self._ids) - 1
        self.verticalScrollBar().setValue(self._tops[row] - MARGIN_Y)

    def bring_into_sight(self, mid: int) -> None:
        """Scroll so the message ``mid`` is in sight, its top first (an editor just opened in
        it, which may reach above the view or below it)."""
        if mid not in self._ids:
            return
        row = self._ids.index(mid)
        self._place_now()
        bar, vh = self.verticalScrollBar(), self.viewport().height()
        top, bottom = self._tops[row] - MARGIN_Y, self._tops[row] + self._heights[row] + MARGIN_Y
        if top < bar.value() or bottom > bar.value() + vh:
            bar.setValue(top if top < bar.value() or bottom - top > vh else bottom - vh)
            self._follow = False  # stay with it, though it may sit near the end
            self._place()

    def retheme(self, theme) -> None:
        """Code colours follow the theme: the widgets that exist are drawn again."""
        self.release_hidden()
        for mid, w in list(self._widgets.items()):
            if not w.editing():
                self._drop(mid, now=True)
        self._place(build=False)  # built again over the next turns of the loop

    def release_hidden(self, everything: bool = False) -> None:
        """Delete the widgets off screen (``everything``: on screen too): before a new style
        sheet, which would restyle each one in one long pass; they are built again afterwards, a
        few per turn of the event loop."""
        for mid, w in list(self._widgets.items()):
            if (everything or w.isHidden()) and not w.editing():
                self._drop(mid, now=True)

    def _variant_requested(self, mid: int, step: int) -> None:
        # the rows below the flipped message are replaced: the view stays where it is instead
        # of following the bottom as it does for a new message
        self._hold = True
        try:
            self.variant_requested.emit(mid, step)
        finally:
            self._hold = False

    def set_busy(self, busy: bool) -> None:
        self.busy = busy
        for row, mid in enumerate(self._ids):
            if mid in self._widgets:
                self._widgets[mid].set_last_answer(row == len(self._ids) - 1, busy)

    # the model's signals
    def _reset(self) -> None:
        for mid in list(self._widgets):
            self._drop(mid)
        items = self.model.items()
        self._ids = [m.id for m in items]
        self._col_width = self._column()[1]
        self._heights = [self._estimate(m) for m in items]
        self._measured = [False] * len(items)
        self._follow = True
        self._place()

    def _inserted(self, parent: QModelIndex, first: int, last: int) -> None:
        new = [self.model.item(r) for r in range(first, last + 1)]
        self._ids[first:first] = [m.id for m in new]
        self._heights[first:first] = [self._estimate(m) for m in new]
        self._measured[first:first] = [False] * len(new)
        if first > 0 and self._ids[first - 1] in self._widgets:  # it is no longer the last answer
            self._widgets[self._ids[first - 1]].set_last_answer(False, self.busy)
        self._follow = self._follow if self._hold else True
        self._place()

    def _removed(self, parent: QModelIndex, first: int, last: int) -> None:
        for mid in self._ids[first:last + 1]:
            if mid in self._widgets:
                self._drop(mid)
        del self._ids[first:last + 1], self._heights[first:last + 1], self._measured[first:last + 1]
        if self._ids and self._ids[-1] in self._widgets:
            self._widgets[self._ids[-1]].set_last_answer(True, self.busy)
        self._place()

    def _changed(self, top: QModelIndex, bottom: QModelIndex) -> None:
        for row in range(top.row(), min(bottom.row(), len(self._ids) - 1) + 1):
            m = self.model.item(row)
            w = self._widgets.get(m.id)
            if w is None:
                self._heights[row], self._measured[row] = self._estimate(m), False
            else:
                w.message = m
                w.refresh()
                self._heights[row] = self._height_of(w)
        self._place()

    # geometry
    def _column(self) -> tuple[int, int]:
        """(x, width) of the message column in the viewport."""
        vw = self.viewport().width()
        width = max(120, min(MAX_COLUMN, vw - 2 * MARGIN_X))
        return max(0, (vw - width) // 2), width

    def _estimate(self, m: Message) -> int:
        fm = QFontMetrics(self.font())
        return estimate_height(m, self._col_width or self._column()[1], fm.lineSpacing() + 3,
                               fm.averageCharWidth() * 1.08)

    def _height_of(self, w: MessageWidget) -> int:
        h = w.heightForWidth(self._col_width) if w.hasHeightForWidth() else w.sizeHint().height()
        return max(h, 24)

    def _build(self, row: int) -> MessageWidget:
        m = self.model.item(row)
        w = MessageWidget(m, self.viewport())
        w.edit_submitted.connect(self.edit_submitted)
        # once its new height is measured (the editor's layout request is handled on the next turn)
        w.edit_started.connect(lambda mid: QTimer.singleShot(20, lambda: self.bring_into_sight(mid)))
        w.regenerate_requested.connect(self.regenerate_requested)
        w.variant_requested.connect(self._variant_requested)
        w.citation_clicked.connect(self.citation_clicked)
        w.set_last_answer(row == len(self._ids) - 1, self.busy)
        w.ensurePolished()
        w.installEventFilter(self)
        self._widgets[m.id] = w
        self._heights[row], self._measured[row] = self._height_of(w), True
        return w

    def _drop(self, mid: int, now: bool = False) -> None:
        """Delete a message's widget: later (in the event loop), or ``now`` (before a new style
        sheet, which would otherwise restyle it first)."""
        w = self._widgets.pop(mid)
        self._dirty.discard(mid)
        w.removeEventFilter(self)
        w.hide()
        if now:
            shiboken6.delete(w)  # gone before the caller restyles (deleteLater waits for the loop)
        else:
            w.deleteLater()

    def _visible_rows(self, value: int, height: int) -> range:
        lo = bisect.bisect_right(self._tops, value) - 1
        hi = bisect.bisect_left(self._tops, value + height)
        return range(max(lo, 0), min(hi, len(self._ids)))

    def _recompute(self) -> int:
        """Tops from heights; returns the column's total height."""
        self._tops = [MARGIN_Y + t + SPACING * i for i, t in
                      enumerate(itertools.accumulate(self._heights, initial=0))][:len(self._heights)]
        if not self._heights:
            return 0
        return self._tops[-1] + self._heights[-1] + MARGIN_Y

    def _place(self, build: bool = True) -> None:
        """Build what the view shows (``build``; else leave it for the next turn), measure it,
        keep the row under the view's top in place (or follow the bottom), then put every widget
        where it belongs."""
        if self._placing:
            return
        self._placing = True
        try:
            self._place_now(build)
        finally:
            self._placing = False

    def _value_for(self, anchor: tuple[int, int] | None, total: int, vh: int) -> int:
        """The scroll position: the bottom when following, else where the anchor row stays put."""
        if not self._tops:
            return 0
        value = max(0, total - vh) if self._follow or anchor is None else self._tops[anchor[0]] + anchor[1]
        return max(0, min(value, max(0, total - vh)))

    def _place_now(self, build: bool = True) -> None:
        bar = self.verticalScrollBar()
        vh = self.viewport().height()
        x, width = self._column()
        if width != self._col_width:
            self._col_width = width
            for row, mid in enumerate(self._ids):
                w = self._widgets.get(mid)
                self._heights[row] = self._height_of(w) if w is not None else self._estimate(self.model.item(row))
                self._measured[row] = w is not None
        anchor = None
        if self._tops and not self._follow:
            anchor_row = max(0, bisect.bisect_right(self._tops, bar.value()) - 1)
            if anchor_row < len(self._tops):
                anchor = (anchor_row, bar.value() - self._tops[anchor_row])
        start = time.perf_counter()
        built = 0
        for _ in range(4):  # building rows changes heights, which can change what is visible
            total = self._recompute()
            value = self._value_for(anchor, total, vh)
            todo = [r for r in self._visible_rows(value, vh) if self._ids[r] not in self._widgets]
            if not todo:
                break
            if not build or built and time.perf_counter() - start + self._build_cost > BUILD_BUDGET_S:
                self._later(0)  # the rest of the screen on the next turns, one piece each
                break
            for r in reversed(todo) if self._follow else todo:  # following: the newest first
                if built and time.perf_counter() - start + self._build_cost > BUILD_BUDGET_S:
                    break
                t = time.perf_counter()
                self._build(r)
                self._build_cost = 0.8 * self._build_cost + 0.2 * (time.perf_counter() - t)
                built += 1
        bar.setRange(0, max(0, total - vh))
        bar.setPageStep(max(vh - 40, 40))
        bar.setSingleStep(48)
        bar.setValue(value)
        shown = self._visible_rows(value, vh)
        for row in shown:
            w = self._widgets.get(self._ids[row])
            if w is None:
                continue  # built on the next turn
            w.setGeometry(x, self._tops[row] - value, width, self._heights[row])
            if w.isHidden():
                w.show()
        self._evict(shown)
        if not self._work.isActive() and self._next_ahead(shown) is not None:
            self._later(AHEAD_DELAY_MS)
        self.empty.setGeometry(x, MARGIN_Y, width, max(vh - 2 * MARGIN_Y, 100))
        self.empty.setVisible(not self._ids)

    def _next_ahead(self, shown: range) -> int | None:
        """The nearest unbuilt row within a few rows of the screen (below first, then above)."""
        for r in itertools.chain(range(shown.stop, min(shown.stop + AHEAD, len(self._ids))),
                                 range(shown.start - 1, max(shown.start - AHEAD, 0) - 1, -1)):
            if self._ids[r] not in self._widgets:
                return r
        return None

    def _later(self, ms: int) -> None:
        if not self._work.isActive() or self._work.remainingTime() > ms:
            self._work.start(ms)

    def _do_work(self) -> None:
        """One piece of the work left for later; the next is scheduled as this one ends."""
        if self._dirty:
            self._measure_built()
            return
        shown = self._visible_rows(self.verticalScrollBar().value(), self.viewport().height())
        if any(self._ids[r] not in self._widgets for r in shown):
            self._place()
            return
        row = self._next_ahead(shown)
        if row is not None:
            self._build(row)
            self._place()

    def _evict(self, shown: range) -> None:
        """Hide the widgets off screen; delete the farthest beyond ``KEEP`` (never one being edited)."""
        rows = {mid: r for r, mid in enumerate(self._ids)}
        off = []
        for mid, w in self._widgets.items():
            r = rows[mid]
            if r not in shown:
                if not w.isHidden():
                    w.hide()
                off.append((min(abs(r - shown.start), abs(r - shown.stop)), mid))
        off.sort()
        dropped = 0
        for _, mid in reversed(off[KEEP:]):  # the farthest first, a few per pass: deleting costs too
            if dropped < DROP_PER_PASS and not self._widgets[mid].editing() and not self._widgets[mid].hasFocus():
                self._drop(mid)
                dropped += 1

    def _measure_built(self) -> None:
        """Measure again the widgets that asked for a new layout (a block opened, an edit began);
        building what that brings into view is left to the next turn."""
        dirty, self._dirty = self._dirty, set()
        for row, mid in enumerate(self._ids):
            if mid in dirty and mid in self._widgets:
                self._heights[row] = self._height_of(self._widgets[mid])
        self._place(build=False)

    # events
    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if event.type() == QEvent.Type.LayoutRequest and isinstance(obj, MessageWidget):
            self._dirty.add(obj.message.id)
            self._later(0)  # a block opened, an edit started: its height changed
        return False

    def _scrolled(self, value: int) -> None:
        if self._placing:
            return
        bar = self.verticalScrollBar()
        self._follow = value >= bar.maximum() - 40
        self._place()

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._place()

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802
        bar = self.verticalScrollBar()
        actions = {Qt.Key.Key_PageDown: lambda: bar.setValue(bar.value() + bar.pageStep()),
                   Qt.Key.Key_PageUp: lambda: bar.setValue(bar.value() - bar.pageStep()),
                   Qt.Key.Key_Down: lambda: bar.setValue(bar.value() + bar.singleStep()),
                   Qt.Key.Key_Up: lambda: bar.setValue(bar.value() - bar.singleStep()),
                   Qt.Key.Key_Home: lambda: bar.setValue(0),
                   Qt.Key.Key_End: lambda: bar.setValue(bar.maximum())}
        act = actions.get(Qt.Key(event.key()))
        if act is None:
            super().keyPressEvent(event)
        else:
            act()

    def built_count(self) -> int:
        """How many message widgets exist (the test checks it stays below the number of messages)."""
        return len(self._widgets)
