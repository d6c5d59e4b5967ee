"""The keyboard: Ctrl+N a new chat, Ctrl+F the search box, Ctrl+L the message box, Esc stops."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from runtime.server.launcher import free_port


def test_shortcuts(make_app, driver):
    h = make_app(free_port())
    w = h.window
    w.show()
    w.activateWindow()
    driver.pump(0.1)
    before = h.chat.conversations.rowCount()
    QTest.keyClick(w, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert h.chat.conversations.rowCount() == before + 1 and h.chat.current is not None
    QTest.keyClick(w, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    driver.pump(0.05)
    assert h.chat_page.sidebar.search.hasFocus()
    QTest.keyClick(w, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier)
    driver.pump(0.05)
    assert h.chat_page.input.hasFocus()
    stopped = []
    h.chat.stop = lambda: stopped.append(True)  # no answer runs here: see that Esc asks to stop one
    QTest.keyClick(h.chat_page.input, Qt.Key.Key_Escape)
    assert stopped == [True]


def _chat_with_answers(h) -> list:
    c = h.chat.new_conversation()
    for i in range(2):
        h.chat.messages.append(h.chat.store.add_message(c.id, "user", f"Question {i}"))
        h.chat.messages.append(h.chat.store.add_message(c.id, "assistant", f"Answer number {i}.", {"finish": "stop"}))
    return h.chat.messages.items()


def test_copy_says_copied_and_the_keys_copy_and_regenerate(make_app, driver):
    from PySide6.QtGui import QGuiApplication

    from app.ui.message_widget import COPIED_MS

    h = make_app(free_port())
    w = h.window
    w.show()
    w.activateWindow()
    msgs = _chat_with_answers(h)
    driver.pump(0.2)
    first = h.chat_page.view.widget_at(1)
    first.copy_button.click()
    assert QGuiApplication.clipboard().text() == msgs[1].content and first.copy_button.text() == "Copied"
    driver.pump(COPIED_MS / 1000 + 0.3)
    assert first.copy_button.text() == "Copy"  # back, ready for the next copy

    QGuiApplication.clipboard().setText("")
    QTest.keyClick(w, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    assert QGuiApplication.clipboard().text() == "Answer number 1."  # the last answer
    assert h.chat_page.view.widget_at(3).copy_button.text() == "Copied"
    asked = []
    h.chat.regenerate = lambda: asked.append(True) or True  # no service here: see that Ctrl+R asks for it
    QTest.keyClick(w, Qt.Key.Key_R, Qt.KeyboardModifier.ControlModifier)
    assert asked == [True]


def test_the_window_size_and_the_open_chat_come_back(make_app, driver, tmp_path):
    port = free_port()
    h = make_app(port, data_dir=tmp_path)
    h.window.show()
    h.window.resize(800, 640)  # the offscreen screen is 800 wide: a size that fits it
    first = h.chat.new_conversation()
    h.chat.rename(first.id, "First")
    second = h.chat.new_conversation()
    h.chat.rename(second.id, "Second")
    h.chat.select(first.id)  # the one open at the end is not the newest
    driver.pump(0.1)
    driver.run(h.shutdown())

    again = make_app(port, data_dir=tmp_path)
    again.window.show()
    driver.pump(0.1)
    assert (again.window.width(), again.window.height()) == (800, 640)
    assert again.chat.current is not None and again.chat.current.id == first.id
    assert again.chat_page.header.title.full_text() == "First"
