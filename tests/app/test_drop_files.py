"""Files dropped on the message box: text files become chips above it and go with the next
message as context (the model gets their text; the message shows their names), a binary or
huge file is refused in words, and dropping never pastes file addresses into the text (real
drop events on a real window offscreen, a loopback server that records what it is sent)."""

from __future__ import annotations

from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication

from app.conversations import ConversationStore
from tests.app.test_variants import _counting_server


def _drop(widget, paths) -> bool:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    enter = QDragEnterEvent(QPoint(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                            Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, enter)
    if not enter.isAccepted():
        return False
    drop = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                      Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(widget, drop)
    return drop.isAccepted()


def test_dropped_text_files_go_with_the_message_as_context(driver, make_app, tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text("# Plan\nShip on Friday.\n")
    data = tmp_path / "data.csv"
    data.write_text("a,b\n1,2\n")
    runner, seen = _counting_server(driver)
    try:
        h = make_app(runner.addresses[0][1])
        h.window.resize(1000, 700)
        h.window.show()
        page = h.chat_page
        box = page.input.viewport()
        page.input.setPlainText("Summarise.")
        assert _drop(box, [notes, data])
        driver.until(lambda: len(page.pending) == 2, 10, "the files to be read")
        assert page.input.toPlainText() == "Summarise."  # no file addresses pasted in
        chips = [w.text() for w in page.attachments.findChildren(type(page.send_button)) if w.isVisibleTo(page)]
        assert len(chips) == 2 and chips[0].startswith("notes.md") and page.attachments.isVisibleTo(page)

        page.send_button.click()
        driver.until(lambda: not h.chat.busy and h.chat.messages.rowCount() == 2, 20, "the answer")
        sent = seen[-1][-1]["content"]
        assert '<file name="notes.md">\n# Plan\nShip on Friday.\n' in sent and '<file name="data.csv">' in sent
        assert sent.endswith("Summarise.")
        assert not page.pending and not page.attachments.isVisibleTo(page)
        widget = page.view.widget_at(0)
        assert widget.body.text().strip() == "Summarise."
        assert widget.attachments.text() == "Attached: notes.md · data.csv"
        saved = ConversationStore(tmp_path / "conversations.sqlite3")
        assert [a["name"] for a in saved.messages(h.chat.current.id)[0].meta["attachments"]] == ["notes.md", "data.csv"]
        saved.close()

        # editing the question keeps its files; the next question does not repeat them
        widget.edit_button.click()
        widget.editor.setPlainText("List the dates.")
        widget.save_button.click()
        driver.until(lambda: not h.chat.busy, 20, "the answer to the edit")
        assert "Ship on Friday." in seen[-1][-1]["content"] and seen[-1][-1]["content"].endswith("List the dates.")
        page.input.setPlainText("Thanks.")
        page.send_button.click()
        driver.until(lambda: not h.chat.busy, 20, "the last answer")
        assert seen[-1][-1]["content"] == "Thanks."
    finally:
        driver.run(runner.cleanup())


def test_a_binary_or_huge_file_is_refused_in_words(driver, make_app, tmp_path):
    from app.attachments import MAX_CHARS
    from runtime.server.launcher import free_port

    h = make_app(free_port())
    h.window.show()
    page = h.chat_page
    blob = tmp_path / "image.bin"
    blob.write_bytes(b"\x89PNG\0\0\0" * 100)
    big = tmp_path / "big.txt"
    big.write_text("x" * (MAX_CHARS + 10))
    assert _drop(page.input.viewport(), [blob])
    driver.until(lambda: h.window.banner.isVisibleTo(h.window), 10, "the refusal")
    assert "not a text file" in h.window.banner.label.text() and not page.pending
    assert _drop(page.input.viewport(), [big])
    driver.until(lambda: "too long" in h.window.banner.label.text(), 10, "the refusal of the long file")
    assert not page.pending and not page.attachments.isVisibleTo(page)
