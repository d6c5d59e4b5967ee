"""Answer versions and branches: regenerating an answer or editing a question keeps the older
versions, the message shows "2 / 2" with buttons to flip, flipping shows each version with the
conversation that followed it, and all of it is stored with the chat (a real window offscreen,
a loopback server that answers with a counter, a real SQLite file)."""

from __future__ import annotations

import itertools
import json

from aiohttp import web

from app.conversations import ConversationStore


def test_store_keeps_every_version_and_the_path_shown(tmp_path):
    path = tmp_path / "c.sqlite3"
    store = ConversationStore(path)
    c = store.create("Fruit")
    q = store.add_message(c.id, "user", "Name a fruit.")
    a1 = store.add_message(c.id, "assistant", "Apple.")
    store.add_message(c.id, "user", "In French?")
    a1b = store.add_message(c.id, "assistant", "Pomme.")
    a2 = store.add_message(c.id, "assistant", "Pear.", parent_id=q.id)  # regenerated
    assert a2.variants == 2 and a2.variant == 2
    assert [m.content for m in store.messages(c.id)] == ["Name a fruit.", "Pear."]
    assert [(m.variant, m.variants) for m in store.messages(c.id)] == [(1, 1), (2, 2)]

    assert store.switch_variant(c.id, a2.id, -1) == a1.id  # back to the first: its follow-up returns
    assert [m.id for m in store.messages(c.id)] == [q.id, a1.id, a1b.id - 1, a1b.id]
    assert store.switch_variant(c.id, a1.id, -1) is None  # nothing older
    store.close()

    again = ConversationStore(path)  # the versions and the version shown survive a restart
    assert [m.content for m in again.messages(c.id)] == ["Name a fruit.", "Apple.", "In French?", "Pomme."]
    assert len(again.tree(c.id)) == 5
    again.switch_variant(c.id, a1.id, 1)
    assert [m.content for m in again.messages(c.id)] == ["Name a fruit.", "Pear."]
    again.close()


def test_a_history_from_before_versions_reads_as_one_line(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE conversations (id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL,
            model TEXT NOT NULL DEFAULT '', system_prompt TEXT NOT NULL DEFAULT '',
            sampling TEXT NOT NULL DEFAULT '{}', created REAL NOT NULL, updated REAL NOT NULL);
        CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id INTEGER NOT NULL,
            role TEXT NOT NULL, content TEXT NOT NULL, meta TEXT NOT NULL DEFAULT '{}', created REAL NOT NULL);
        INSERT INTO conversations (title, created, updated) VALUES ('a', 0, 0), ('b', 0, 0);
        INSERT INTO messages (conversation_id, role, content, created) VALUES
            (1, 'user', 'q1', 0), (2, 'user', 'other', 0), (1, 'assistant', 'a1', 0), (1, 'user', 'q2', 0);
    """)
    db.commit()
    db.close()
    store = ConversationStore(path)
    assert [m.content for m in store.messages(1)] == ["q1", "a1", "q2"]
    assert [m.content for m in store.messages(2)] == ["other"]
    assert all(m.variants == 1 for m in store.messages(1))
    store.close()


def _counting_server(driver):
    """A loopback chat service whose every answer is "Answer N" (N counts the requests) and
    which records the messages each request sent."""
    n = itertools.count(1)
    seen: list[list[dict]] = []

    async def health(request):
        return web.json_response({"status": "ok", "service": "hearth", "engine": {"state": "idle"}})

    async def chat(request):
        body = await request.json()
        seen.append(body["messages"])
        r = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await r.prepare(request)
        text = f"Answer {next(n)}"
        for piece, finish in ((text[:4], None), (text[4:], "stop")):
            chunk = {"model": "m", "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": finish}]}
            await r.write(f"data: {json.dumps(chunk)}\n\n".encode())
        await r.write(b"data: [DONE]\n\n")
        return r

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    driver.run(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    driver.run(site.start())
    return runner, seen


def test_regenerate_and_edit_keep_versions_to_flip_between(driver, make_app, tmp_path):
    runner, seen = _counting_server(driver)
    try:
        h = make_app(runner.addresses[0][1])
        h.window.resize(1000, 700)
        h.window.show()
        h.chat.new_conversation()
        view = h.chat_page.view

        def send(text):
            h.chat_page.input.setPlainText(text)
            h.chat_page.send_button.click()
            driver.until(lambda: not h.chat.busy, 20, "the answer")

        def texts():
            return [view.widget_at(i).message.content for i in range(h.chat.messages.rowCount())]

        send("Name a fruit.")
        send("In French?")
        assert texts() == ["Name a fruit.", "Answer 1", "In French?", "Answer 2"]

        # regenerate: a second version of the last answer; the first stays, one click away
        view.widget_at(-1).regen_button.click()
        driver.until(lambda: not h.chat.busy, 20, "the regenerated answer")
        assert texts()[-1] == "Answer 3"
        last = view.widget_at(-1)
        switch = last.variant_switch
        assert switch.isVisibleTo(last) and switch.label.text() == "2 / 2"
        assert switch.older.isEnabled() and not switch.newer.isEnabled()
        assert [m["content"] for m in seen[-1]] == ["Name a fruit.", "Answer 1", "In French?"]
        switch.older.click()
        assert texts()[-1] == "Answer 2" and view.widget_at(-1).variant_switch.label.text() == "1 / 2"
        view.widget_at(-1).variant_switch.newer.click()
        assert texts()[-1] == "Answer 3"

        # edit the first question: a new branch; the old question and all that followed it stay
        first = view.widget_at(0)
        assert not first.variant_switch.isVisibleTo(first) if "variant_switch" in first._parts else True
        first.edit_button.click()
        first.editor.setPlainText("Name a vegetable.")
        first.save_button.click()
        driver.until(lambda: not h.chat.busy, 20, "the answer to the edited question")
        assert texts() == ["Name a vegetable.", "Answer 4"]
        assert [m["content"] for m in seen[-1]] == ["Name a vegetable."]  # the old branch is not sent
        first = view.widget_at(0)
        assert first.variant_switch.label.text() == "2 / 2"
        first.variant_switch.older.click()
        assert texts() == ["Name a fruit.", "Answer 1", "In French?", "Answer 3"]  # as it was left
        assert view.widget_at(-1).variant_switch.label.text() == "2 / 2"

        # a new message continues the branch shown; it is all stored with the chat
        send("And in Spanish?")
        assert texts()[-2:] == ["And in Spanish?", "Answer 5"]
        assert [m["content"] for m in seen[-1]][:4] == ["Name a fruit.", "Answer 1", "In French?", "Answer 3"]
        cid = h.chat.current.id
        saved = ConversationStore(tmp_path / "conversations.sqlite3")
        assert [m.content for m in saved.messages(cid)] == texts()
        assert len(saved.tree(cid)) == 9
        saved.close()

        # flipping is refused while an answer is being written
        h.chat_page.input.setPlainText("One more.")
        h.chat_page.send_button.click()
        assert h.chat.busy and not view.widget_at(0).variant_switch.older.isEnabled()
        assert not h.chat.switch_variant(h.chat.messages.item(0).id, 1)
        driver.until(lambda: not h.chat.busy, 20, "the last answer")
    finally:
        driver.run(runner.cleanup())
