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
