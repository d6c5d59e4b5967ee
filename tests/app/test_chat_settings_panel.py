"""The chat's settings as a panel beside the conversation (real widgets, offscreen): the header's
settings button (or Ctrl+,) opens it and it stays open; it shows the open chat's settings and
follows another chat when one opens; each change is applied to its chat as it is made (a change
made just before another chat opens goes to the chat it was made in); it fits an 800x600 window."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from app.conversations import Sampling
from app.ui.chat_settings import APPLY_AFTER_MS
from runtime.server.launcher import free_port


def test_the_settings_panel_stays_open_follows_the_chat_and_applies_each_change(make_app, driver):
    h = make_app(free_port())
    w = h.window
    w.show()
    w.resize(1280, 800)
    page = h.chat_page
    a = h.chat.new_conversation()
    h.chat.configure(system_prompt="Answer in French.", sampling=Sampling(temperature=0.3))
    b = h.chat.new_conversation()
    h.chat.configure(system_prompt="Be brief.", sampling=Sampling(temperature=1.1, max_tokens=99))
    h.chat.select(a.id)
    driver.pump(0.1)
    panel = page.settings_panel
    assert not panel.isVisible()
    page.header.settings_button.click()
    driver.pump(0.1)
    assert panel.isVisible() and page.header.settings_button.isChecked()
    assert panel.system.toPlainText() == "Answer in French." and abs(panel.temperature.value() - 0.3) < 1e-9
    assert panel.width() >= 240 and page.view.width() >= 400, (panel.width(), page.view.width())

    panel.temperature.setValue(0.7)  # applied once the user pauses
    driver.pump(APPLY_AFTER_MS / 1000 + 0.3)
    assert abs(h.chat.store.get(a.id).sampling.temperature - 0.7) < 1e-9

    h.chat.select(b.id)  # the panel follows the chat
    driver.pump(0.1)
    assert panel.isVisible() and panel.system.toPlainText() == "Be brief." and panel.max_tokens.value() == 99
    panel.system.setPlainText("Be brief and kind.")
    h.chat.select(a.id)  # at once: the change belongs to b, not to a
    driver.pump(APPLY_AFTER_MS / 1000 + 0.3)
    assert h.chat.store.get(b.id).system_prompt == "Be brief and kind."
    assert h.chat.store.get(a.id).system_prompt == "Answer in French."
    assert panel.system.toPlainText() == "Answer in French."
    # the request the chat sends carries the panel's settings
    assert h.chat.store.get(b.id).sampling.max_tokens == 99

    QTest.keyClick(page.input, Qt.Key.Key_Comma, Qt.KeyboardModifier.ControlModifier)  # closes it
    driver.pump(0.1)
    assert not panel.isVisible() and not page.header.settings_button.isChecked()
    QTest.keyClick(page.input, Qt.Key.Key_Comma, Qt.KeyboardModifier.ControlModifier)  # and opens it again
    driver.pump(0.1)
    assert panel.isVisible() and panel.system.hasFocus()

    w.resize(800, 600)  # the smallest window: the chat list folds away, the conversation keeps its room
    driver.pump(0.3)
    side, middle, width = page.split.sizes()
    assert side == 0 and middle >= 400 and width >= panel.minimumWidth(), page.split.sizes()
    assert panel.geometry().right() <= page.width()
    page.toggle_sidebar()  # the chat list comes back on demand; the panel keeps its width
    driver.pump(0.1)
    assert panel.isVisible() and page.split.sizes()[0] > 0 and page.split.sizes()[2] == width
