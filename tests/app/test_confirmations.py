"""Destructive actions ask first (real window offscreen, a real service): deleting a chat names
it and waits for the answer, deleting a model says what goes, and a file imported again is not
added twice."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from runtime.server.launcher import free_port
from tests.store.hubfiles import tiny_model


def test_deleting_a_chat_asks_and_cancel_keeps_it(make_app, driver):
    h = make_app(free_port())
    h.window.show()
    side = h.chat_page.sidebar
    c = h.chat.new_conversation()
    h.chat.rename(c.id, "Holiday plans")
    side.ask_delete(c.id)
    box = side.confirmation
    assert box is not None and box.isVisible() and "Holiday plans" in box.text()
    assert box.defaultButton() is not box.yes_button  # Enter does not delete
    box.reject()  # Cancel
    driver.pump(0.05)
    assert h.chat.store.get(c.id) is not None and h.chat.conversations.row_of(c.id) is not None

    side.list.setFocus()
    side.list.setCurrentIndex(h.chat.conversations.index(h.chat.conversations.row_of(c.id)))
    QTest.keyClick(side.list, Qt.Key.Key_Delete)  # the keyboard asks the same question
    box = side.confirmation
    assert box is not None and box.isVisible()
    box.yes_button.click()
    driver.pump(0.05)
    assert h.chat.store.get(c.id) is None and h.chat.conversations.row_of(c.id) is None


def test_deleting_a_model_asks_and_a_reimport_adds_nothing(service, driver, make_app, tmp_path):
    from runtime.config import data_dir

    h = make_app(service.port)
    assert driver.run(h.start())
    h.models.data_dir = data_dir()  # the service's import token lives there
    mine = tiny_model(tmp_path / "Mine-Q8_0.gguf")
    before = {m.id for m in h.models.local.items()}
    assert driver.run(h.models.import_file(str(mine)))
    added = [m for m in h.models.local.items() if m.id not in before]
    assert len(added) == 1

    # the same file again, and a copy of it elsewhere: nothing is added, the window says why
    copy = tmp_path / "elsewhere"
    copy.mkdir()
    (copy / mine.name).write_bytes(mine.read_bytes())
    for path in (mine, copy / mine.name):
        assert not driver.run(h.models.import_file(str(path)))
        assert len(h.models.local.items()) == len(before) + 1
        assert "already installed" in h.window.banner.label.text()

    page = h.models_page
    row = next(r for r in page.local_list.rows if r.model.id == added[0].id)
    row.button.click()
    box = page.confirmation
    assert box is not None and "the file stays" in box.informativeText() and "Remove" in box.yes_button.text()
    box.reject()
    driver.pump(0.3)
    assert added[0].id in {m.id for m in h.models.local.items()}, "Cancel removed the model"
    row.button.click()
    page.confirmation.yes_button.click()
    driver.until(lambda: added[0].id not in {m.id for m in h.models.local.items()}, 30, "the removal")
