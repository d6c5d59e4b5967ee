"""The keyboard as in every chat app (real window, offscreen): Enter sends and Shift+Enter starts
a new line, Tab leaves the message box, Enter opens a chat from the list, the navigation rail
takes the focus and Ctrl+1..4 change the page, Ctrl+Q quits, and the focus shows in both themes."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from runtime.server.launcher import free_port


def _window(make_app, driver):
    h = make_app(free_port())  # no service: the keyboard needs none
    h.window.show()
    h.window.activateWindow()
    driver.pump(0.1)
    return h


def test_enter_sends_shift_enter_breaks_the_line_and_tab_leaves(make_app, driver):
    h = _window(make_app, driver)
    sent: list[str] = []
    h.chat.send = lambda text: sent.append(text) or True
    box = h.chat_page.input
    box.setFocus()
    driver.pump(0.05)
    QTest.keyClicks(box, "first line")
    QTest.keyClick(box, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    QTest.keyClicks(box, "second line")
    assert sent == [] and box.toPlainText() == "first line\nsecond line"
    QTest.keyClick(box, Qt.Key.Key_Return)
    assert sent == ["first line\nsecond line"] and box.toPlainText() == ""
    QTest.keyClicks(box, "keypad")
    QTest.keyClick(box, Qt.Key.Key_Enter, Qt.KeyboardModifier.KeypadModifier)
    assert sent[-1] == "keypad"
    QTest.keyClicks(box, "x")
    QTest.keyClick(box, Qt.Key.Key_Tab)
    driver.pump(0.05)
    assert "\t" not in box.toPlainText() and not box.hasFocus(), "Tab typed a tab instead of moving on"


def test_enter_opens_a_chat_from_the_list(make_app, driver):
    h = _window(make_app, driver)
    a = h.chat.new_conversation()
    h.chat.rename(a.id, "Apples")
    b = h.chat.new_conversation()
    h.chat.rename(b.id, "Bananas")
    assert h.chat.current.id == b.id
    lst = h.chat_page.sidebar.list
    lst.setFocus()
    lst.setCurrentIndex(h.chat.conversations.index(h.chat.conversations.row_of(a.id)))
    QTest.keyClick(lst, Qt.Key.Key_Return)
    assert h.chat.current.id == a.id
    # Enter in the search box opens the first match
    h.chat_page.sidebar.search.setText("Banan")
    QTest.keyClick(h.chat_page.sidebar.search, Qt.Key.Key_Return)
    assert h.chat.current.id == b.id


def test_the_rail_takes_focus_and_pages_have_shortcuts(make_app, driver):
    h = _window(make_app, driver)
    w = h.window
    assert w.nav.focusPolicy() != Qt.FocusPolicy.NoFocus
    for i, name in enumerate(("Chat", "Models", "Server", "Settings")):
        QTest.keyClick(w, getattr(Qt.Key, f"Key_{i + 1}"), Qt.KeyboardModifier.ControlModifier)
        assert w.stack.currentWidget() is w.pages[name], f"Ctrl+{i + 1} did not open {name}"
    w.nav.setFocus()
    driver.pump(0.05)
    assert w.nav.hasFocus()
    QTest.keyClick(w.nav, Qt.Key.Key_Up)
    assert w.stack.currentWidget() is w.pages["Server"]
    quits: list[bool] = []
    w.quit_handler = lambda: quits.append(True)
    QTest.keyClick(w, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    assert quits == [True]


def test_focus_is_visible_in_both_themes(make_app, driver):
    h = _window(make_app, driver)
    page = h.chat_page
    for dark in (False, True):
        h.apply_theme(dark=dark)
        for widget in (page.send_button, page.sidebar.new_button, page.tools_button, page.sidebar.search):
            h.window.activateWindow()
            page.input.setFocus()
            driver.pump(0.05)
            before = widget.grab().toImage()
            widget.setFocus(Qt.FocusReason.TabFocusReason)
            driver.pump(0.05)
            assert widget.hasFocus()
            after = widget.grab().toImage()
            assert before != after, f"{widget.objectName() or type(widget).__name__} looks the same with the focus"
