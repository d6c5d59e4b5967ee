"""Nothing in the window shows what the service did not say (real window offscreen, real
services): after Stop the pages drop their models and counters; after a port change the Server
page shows what answers on the new port; "No chats yet" never shows above a list; the header's
badges are the chat's model's; renaming a chat leaves it where it was."""

from __future__ import annotations

from app.conversations import ConversationStore
from runtime.server.launcher import free_port


def _picker_texts(h) -> list[str]:
    p = h.chat_page.model_picker
    return [p.itemText(i) for i in range(p.count())]


def test_after_stop_the_pages_drop_models_and_counters(smollm2_path, driver, make_app):
    h = make_app(free_port())
    assert driver.run(h.start(), 240) and h.service.owned
    driver.until(lambda: h.models.residents and h.service.stats, 180, "a resident model and counters")
    driver.run(h.models.refresh_available())
    assert h.models_page.running_label.text() == "smollm2-135m"
    assert any("● loaded" in t for t in _picker_texts(h))
    assert "Tokens generated" in [h.server_page.counters.itemAt(i, h.server_page.counters.ItemRole.LabelRole).widget().text()
                                  for i in range(h.server_page.counters.rowCount())
                                  if h.server_page.counters.itemAt(i, h.server_page.counters.ItemRole.LabelRole)]

    seen: list[tuple[str, str]] = []
    h.service.state_changed.connect(lambda s: seen.append((s, h.server_page.status.text())))
    h.server_page.stop_button.click()
    driver.until(lambda: h.service.state == "stopped", 30, "the service to stop")
    assert ("stopping", "Stopping…") in seen, f"no progress shown while stopping: {seen}"
    assert h.models_page.running_label.text() == "No model loaded" and not h.models_page.residents.cards
    assert not any("● loaded" in t for t in _picker_texts(h)), _picker_texts(h)
    assert h.server_page.model.text() == "–"
    first = h.server_page.counters.itemAt(0, h.server_page.counters.ItemRole.SpanningRole)
    assert first is not None and "No numbers" in first.widget().text()
    assert "model" not in h.window.service_label.text().split("·")[-1] or "·" not in h.window.service_label.text()


def test_a_port_change_shows_what_answers_there(service, driver, make_app):
    h = make_app(service.port)
    assert driver.run(h.start()) and not h.service.owned
    assert h.server_page.status.text().startswith("Running")
    page = h.settings_page
    empty = free_port()
    page.port.setValue(empty)  # nothing listens there
    page.save()
    driver.until(lambda: h.service.state != "running" and str(empty) in h.server_page.address.text(), 30,
                 lambda: f"the new port checked: {h.service.state}, {h.server_page.address.text()}")
    assert not h.server_page.status.text().startswith("Running"), h.server_page.status.text()
    assert h.server_page.model.text() == "–" and h.server_page.start_button.isEnabled()
    page.port.setValue(service.port)  # back to the service: it is found again
    page.save()
    driver.until(lambda: h.service.state == "running", 30, "the service found again")
    assert h.server_page.status.text().startswith("Running")


def test_no_chats_yet_only_when_there_are_none(make_app, driver, tmp_path):
    store = ConversationStore(tmp_path / "conversations.sqlite3")
    for title in ("Older", "Newer"):
        store.add_message(store.create(title).id, "user", "hello")
    store.close()
    h = make_app(free_port())
    h.window.show()
    driver.pump(0.05)
    side = h.chat_page.sidebar
    assert h.chat.conversations.rowCount() == 2
    assert not side.empty.isVisibleTo(side), "'No chats yet' above a list of two"
    side.search.setText("zebra")
    assert side.empty.isVisibleTo(side) and "zebra" in side.empty.text()
    side.search.setText("")
    assert not side.empty.isVisibleTo(side)


def test_renaming_a_chat_leaves_it_in_its_place(make_app, driver):
    h = make_app(free_port())
    ids = []
    for title in ("One", "Two", "Three"):
        c = h.chat.new_conversation()
        h.chat.store.add_message(c.id, "user", title)  # each has a message: the list is by activity
        h.chat.rename(c.id, title)
        ids.append(c.id)
    h.chat.reload()
    order = [c.id for c in h.chat.conversations.items()]
    h.chat.rename(ids[0], "One, renamed")  # the oldest, at the bottom
    assert [c.id for c in h.chat.conversations.items()] == order
    h.chat.reload()
    assert [c.id for c in h.chat.conversations.items()] == order, "a rename moved the chat"
    assert h.chat.conversations.item(order.index(ids[0])).title == "One, renamed"


def test_the_header_describes_the_chats_model(make_app, driver):
    h = make_app(free_port())
    h.window.show()
    page = h.chat_page
    page.set_models(["smollm2-135m", "gemma-3-270m", "minilm-l6"], "smollm2-135m")
    rows = [{"id": "smollm2-135m", "loaded": True, "capabilities": ["chat", "completion", "tools"]},
            {"id": "gemma-3-270m", "loaded": False, "capabilities": ["completion"]},
            {"id": "minilm-l6", "loaded": False, "capabilities": ["embedding"]}]
    page.set_available(rows)
    h.chat.new_conversation()
    h.chat.configure(model="gemma-3-270m")
    page._current(h.chat.current)
    driver.pump(0.05)
    badges = [page.header.badge_row.itemAt(i).widget().text() for i in range(page.header.badge_row.count())]
    assert "tools" not in badges, "the loaded model's badges shown for a chat that uses another model"
    p = page.model_picker
    assert [p.itemData(i) for i in range(p.count())] == ["", "smollm2-135m", "gemma-3-270m"], \
        "the picker offers an embedding model"
    h.chat.configure(model="")  # the default (smollm2-135m): its badges
    page._current(h.chat.current)
    badges = [page.header.badge_row.itemAt(i).widget().text() for i in range(page.header.badge_row.count())]
    assert badges == ["tools"]
