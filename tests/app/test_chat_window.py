"""The chat window against a real service with the default model: stream, save, restart, stop,
regenerate, edit and resend, and errors shown in the window."""

from __future__ import annotations

from app.conversations import ConversationStore, Sampling


def _send(h, driver, text: str) -> None:
    h.chat_page.input.setPlainText(text)
    h.chat_page.send_button.click()
    assert h.chat.busy, "sending did not start a generation"


def _wait_answer(h, driver, timeout: float = 180.0) -> None:
    driver.until(lambda: not h.chat.busy, timeout, "the answer to finish")


def _short(h, max_tokens: int = 32) -> None:
    h.chat.configure(sampling=Sampling(temperature=0.0, top_p=1.0, max_tokens=max_tokens, seed=7))


def test_answer_streams_into_the_view_and_survives_a_restart(service, driver, make_app, tmp_path):
    h = make_app(service.port)
    assert driver.run(h.start())
    assert h.service.state == "running" and not h.service.owned  # attached, not started
    assert h.window.windowTitle().startswith("Hearth")
    h.chat.new_conversation()
    _short(h, 40)
    seen: list[str] = []
    h.chat.messages.dataChanged.connect(
        lambda *_: seen.append(h.chat.messages.item(h.chat.messages.rowCount() - 1).content))
    _send(h, driver, "Name three colours of the rainbow.")
    _wait_answer(h, driver)

    answer = h.chat.messages.item(1)
    assert answer.role == "assistant" and answer.content.strip()
    partial = {s for s in seen if s and s != answer.content}
    assert partial, "the answer arrived in one piece, not streamed"
    assert all(answer.content.startswith(p) for p in partial)
    assert answer.meta["finish"] in ("stop", "length")
    assert answer.meta["model"] == "smollm2-135m"
    assert answer.meta["completion_tokens"] > 0 and answer.meta["ttft_s"] > 0
    assert answer.meta["cached_tokens"] >= 0 and answer.meta["prompt_tokens"] > 0
    widget = h.chat_page.view.widget_at(1)
    assert answer.content.split()[0] in widget.body.text()
    assert "smollm2-135m" in widget.stats.text() and "tok/s" in widget.stats.text()
    title = h.chat.current.title
    assert title.startswith("Name three colours")

    saved = ConversationStore(tmp_path / "conversations.sqlite3")
    assert [m.content for m in saved.messages(h.chat.current.id)] == [m.content for m in h.chat.messages.items()]
    saved.close()

    driver.run(h.shutdown())
    again = make_app(service.port)
    assert driver.run(again.start())
    convs = again.chat.conversations.items()
    assert [c.title for c in convs] == [title]
    again.chat.select(convs[0].id)
    view = again.chat_page.view
    texts = [view.widget_at(i).message.content for i in range(again.chat.messages.rowCount())]
    assert texts == ["Name three colours of the rainbow.", answer.content]
    assert again.chat_page.view.widget_at(1).stats.text()  # the numbers were saved too


def test_stop_mid_stream_keeps_the_partial_answer(service, driver, make_app):
    h = make_app(service.port)
    assert driver.run(h.start())
    h.chat.new_conversation()
    _short(h, 600)
    _send(h, driver, "Count from 1 to 300, one number per line.")
    driver.until(lambda: len(h.chat.messages.item(1).content) > 5, 120, "the first streamed text")
    h.chat_page.stop_button.click()
    _wait_answer(h, driver, 30)
    stopped = h.chat.messages.item(1)
    assert stopped.meta["finish"] == "stopped"
    assert "stopped" in h.chat_page.view.widget_at(1).stats.text()
    assert h.store.messages(h.chat.current.id)[1].content == stopped.content
    driver.until(lambda: all(m.get("running", 0) == 0 for m in service.stats()["models"]), 30,
                 "the service to drop the stopped request")


def test_regenerate_then_edit_and_resend(service, driver, make_app):
    h = make_app(service.port)
    assert driver.run(h.start())
    h.chat.new_conversation()
    _short(h, 8)
    _send(h, driver, "Name a fruit.")
    _wait_answer(h, driver)
    first_answer = h.chat.messages.item(1)

    # regenerate: the last answer is replaced by a new one
    last = h.chat_page.view.widget_at(-1)
    assert last.regen_button.isVisibleTo(last)
    last.regen_button.click()
    assert h.chat.busy
    _wait_answer(h, driver)
    msgs = h.store.messages(h.chat.current.id)
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert msgs[1].id != first_answer.id and msgs[1].content.strip()
    assert msgs[1].meta["finish"] in ("stop", "length")

    # a second turn, then edit the first question: everything after it is replaced
    _send(h, driver, "And in French?")
    _wait_answer(h, driver)
    assert len(h.chat.messages.items()) == 4
    first = h.chat_page.view.widget_at(0)
    first.edit_button.click()
    assert first.editor.isVisibleTo(first)
    first.editor.setPlainText("Say hello.")
    first.save_button.click()
    assert h.chat.busy
    _wait_answer(h, driver)
    msgs = h.store.messages(h.chat.current.id)
    assert [(m.role, m.content if m.role == "user" else None) for m in msgs] == \
        [("user", "Say hello."), ("assistant", None)]
    assert msgs[1].content.strip()
    view = h.chat_page.view
    assert [view.widget_at(i).message.id for i in range(len(msgs))] == [m.id for m in msgs]


def test_unknown_model_is_explained_in_the_window(service, driver, make_app):
    h = make_app(service.port)
    assert driver.run(h.start())
    h.chat.new_conversation()
    h.chat.configure(model="no-such-model")
    _send(h, driver, "Hello")
    _wait_answer(h, driver, 30)
    answer = h.chat.messages.item(1)
    assert answer.meta["finish"] == "error"
    assert "not installed" in answer.meta["error"]
    assert h.window.banner.isVisibleTo(h.window)
    assert "Models page" in h.window.banner.label.text()


def test_conversation_sidebar_new_rename_delete_search(service, driver, make_app):
    h = make_app(service.port)
    assert driver.run(h.start())
    side = h.chat_page.sidebar
    side.new_button.click()
    a = h.chat.current
    h.chat.rename(a.id, "Apples")
    side.new_button.click()
    b = h.chat.current
    h.chat.rename(b.id, "Bananas")
    assert [c.title for c in h.chat.conversations.items()] == ["Bananas", "Apples"]
    h.store.add_message(a.id, "user", "a question about kiwis")
    side.search.setText("kiwi")
    assert [c.title for c in h.chat.conversations.items()] == ["Apples"]
    side.search.setText("")
    h.chat.delete(b.id)
    assert [c.title for c in h.chat.conversations.items()] == ["Apples"]
    assert h.chat.current is None and h.chat_page.view.empty.isVisibleTo(h.chat_page.view)
    assert h.store.get(b.id) is None
