"""The message view of a long conversation (real widgets, offscreen): only what is near the
screen is built, scrolling builds what comes into view and keeps the row under the top in place,
a long line of code scrolls inside its block instead of widening the column, and an answer that
streams at the end is followed. (Time to first paint and the longest block: bench/message_view.py.)"""

from __future__ import annotations

from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QApplication

from app.conversations import Message
from app.qt_models import MessageListModel
from app.ui.blocks import CodeBlock
from app.ui.message_view import MessageView
from app.ui.style import palette, stylesheet, theme_for


def _conversation(n: int) -> list[Message]:
    out = []
    for i in range(n):
        if i % 2 == 0:
            out.append(Message(i + 1, "user", f"Question {i}: what is a decorator?"))
        else:
            text = f"Answer {i}. A decorator wraps a function.\n\n- one\n- two\n\n" + "Some more words. " * (i % 7 * 5)
            out.append(Message(i + 1, "assistant", text, {"model": "smollm2-135m", "finish": "stop"}))
    return out


def _view(driver, width: int = 742, height: int = 600) -> tuple[MessageView, MessageListModel]:
    app = QApplication.instance()
    app.setStyle("Fusion")
    app.setPalette(palette(theme_for(False)))
    app.setStyleSheet(stylesheet(theme_for(False)))
    model = MessageListModel()
    view = MessageView(model)
    view.resize(width, height)
    view.show()
    driver.pump(0.05)
    return view, model


def _shown_rows(view: MessageView) -> list[int]:
    """Rows whose widgets are on screen, by their place in the viewport."""
    vp = view.viewport().rect()
    return sorted(view._ids.index(w.message.id) for w in view.widgets
                  if w.isVisible() and w.geometry().intersects(vp))


def test_a_long_chat_builds_only_what_is_near_the_screen(driver):
    view, model = _view(driver)
    model.reset(_conversation(1000))
    driver.pump(0.3)
    built = view.built_count()
    assert 0 < built < 60, f"{built} message widgets for 1000 messages"
    shown = _shown_rows(view)
    assert shown and shown[-1] == 999, "the chat opens at its end"
    bar = view.verticalScrollBar()
    assert bar.value() == bar.maximum()

    bar.setValue(0)  # to the top: the first rows are built, the view never holds them all
    driver.pump(0.3)
    assert _shown_rows(view)[0] == 0
    assert view.built_count() < 60
    bar.setValue(bar.maximum() // 2)
    driver.pump(0.3)
    middle = _shown_rows(view)
    assert middle and 100 < middle[0] < 900 and view.built_count() < 60


def test_scrolling_keeps_the_row_under_the_top_in_place(driver):
    view, model = _view(driver)
    model.reset(_conversation(400))
    driver.pump(0.2)
    bar = view.verticalScrollBar()
    bar.setValue(bar.maximum() // 3)
    driver.pump(0.3)
    row = _shown_rows(view)[1]
    w = view.widget_at(row)
    y = w.mapTo(view.viewport(), QPoint(0, 0)).y()
    bar.setValue(bar.value() - 3 * bar.pageStep())  # rows above are built and measured ...
    driver.pump(0.3)
    bar.setValue(bar.value() + 3 * bar.pageStep())  # ... and coming back finds the row where it was
    driver.pump(0.3)
    assert abs(w.mapTo(view.viewport(), QPoint(0, 0)).y() - y) <= 2


def test_a_long_code_line_scrolls_inside_its_block(driver):
    view, model = _view(driver, width=1180 - 188 - 250, height=600)
    line = "x = " + " + ".join(f"value_{i}" for i in range(120))  # about 1,400 characters on one line
    model.reset([Message(1, "user", "Show me"),
                 Message(2, "assistant", f"Here:\n\n```python\n{line}\n```\n\nThat is all.", {"finish": "stop"})])
    driver.pump(0.3)
    w = view.widget_at(1)
    (code,) = [p for p in w.body.parts if isinstance(p, CodeBlock)]
    vp = view.viewport()
    assert w.geometry().right() <= vp.width(), "the message is wider than the view"
    copy = code.copy_button
    right = copy.mapTo(vp, QPoint(copy.width(), 0)).x()
    assert copy.isVisible() and right <= vp.width(), f"Copy ends at {right}, past the view's {vp.width()} px"
    assert code.code_scroll.horizontalScrollBar().maximum() > 0, "the long line does not scroll in its block"
    assert code.width() <= w.width()


def test_a_streaming_answer_is_followed_and_a_reader_above_is_left_alone(driver):
    view, model = _view(driver)
    model.reset(_conversation(60))
    driver.pump(0.2)
    live = Message(61, "assistant", "", {"finish": "streaming"})
    model.append(live)
    bar = view.verticalScrollBar()
    for i in range(20):
        live.content += f"Line {i} of the answer, which grows as it streams in.\n\n"
        model.changed(live.id)
        driver.pump(0.02)
    assert bar.value() == bar.maximum() and 60 in _shown_rows(view)
    bar.setValue(bar.maximum() // 2)  # the user scrolls up to read: the stream no longer pulls the view
    driver.pump(0.3)
    reading = view.widget_at(_shown_rows(view)[1])
    y = reading.mapTo(view.viewport(), QPoint(0, 0)).y()
    for i in range(5):
        live.content += "More.\n\n"
        model.changed(live.id)
        driver.pump(0.02)
    assert abs(reading.mapTo(view.viewport(), QPoint(0, 0)).y() - y) <= 2
    assert bar.value() < bar.maximum() - 100
