"""Chat search shows where it matched (real window, offscreen, no service): under each chat found,
a one-line snippet of the first message that contains the text with the match in bold (none for
a chat found by its title alone); Enter opens the first hit and the conversation scrolls to the
message that matched; and the search stays quick on a store of 200 chats of 50 messages."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from app.conversations import SNIPPET_CHARS, ConversationStore, snippet
from runtime.server.launcher import free_port

FILLER = ("We talked about the weather, the harbour and the trains for a long while, and then about "
          "the price of bread in the market on Saturdays.\n\n")


def _window(make_app, driver):
    h = make_app(free_port())  # no service: searching needs none
    h.window.resize(1000, 700)
    h.window.show()
    driver.pump(0.1)
    return h


def test_a_snippet_is_one_line_around_the_match():
    text = FILLER * 5 + "The lighthouse keeper's cat is named\n   Marmalade Ostrander.  " + FILLER * 5
    before, match, after = snippet(text, "marmalade")
    line = before + match + after
    assert match == "Marmalade"
    assert "\n" not in line and "  " not in line, line
    assert line.startswith("…") and line.endswith("…"), line
    assert "cat is named Marmalade Ostrander." in line
    assert len(line) <= SNIPPET_CHARS + 2
    assert snippet("short and sweet", "SWEET") == ("short and ", "sweet", "")
    assert snippet("nothing here", "absent") is None


def test_search_hits_show_a_snippet_and_open_at_the_match(make_app, driver):
    h = _window(make_app, driver)
    store, side = h.store, h.chat_page.sidebar
    fruit = store.create("Fruit salad")
    store.add_message(fruit.id, "user", "A recipe please.")
    long = store.create("A long chat")
    for i in range(60):
        text = (FILLER * 3 + "Remember the pomegranate seeds, they go on last.\n" + FILLER) if i == 3 else FILLER * 4
        store.add_message(long.id, "user" if i % 2 == 0 else "assistant", text)
    titled = store.create("Pomegranate ideas")  # found by its title alone
    store.add_message(titled.id, "user", "Something else entirely.")
    h.chat.reload()
    found_message = store.messages(long.id)[3].id

    side.search.setFocus()
    QTest.keyClicks(side.search, "pomegranate")
    titles = [c.title for c in h.chat.conversations.items()]
    assert sorted(titles) == ["A long chat", "Pomegranate ideas"], titles
    rows = {c.title: r for r, c in enumerate(h.chat.conversations.items())}
    line = side.snippet(rows["A long chat"])
    assert "Remember the pomegranate seeds" in line and "\n" not in line, line
    assert h.chat.search_hits[long.id].match == "pomegranate"
    assert h.chat.search_hits[long.id].message_id == found_message
    assert side.snippet(rows["Pomegranate ideas"]) == "", "a title-only match shows no snippet"
    # the row with a snippet is taller than the one without, and both paint
    driver.pump(0.05)
    tall = side.list.visualRect(h.chat.conversations.index(rows["A long chat"])).height()
    short = side.list.visualRect(h.chat.conversations.index(rows["Pomegranate ideas"])).height()
    assert tall > short, (tall, short)
    assert not side.list.viewport().grab().isNull()

    # Enter opens the first hit; the chat opens at the message that matched, not at its end
    first = h.chat.conversations.items()[0]
    if first.id != long.id:  # make the long chat the first hit
        side.search.setText("pomegranate seeds")
    QTest.keyClick(side.search, Qt.Key.Key_Return)
    assert h.chat.current.id == long.id
    driver.pump(0.3)
    view = h.chat_page.view
    bar = view.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() < bar.maximum(), "the chat opened at its end, not at the match"
    vp = view.viewport().rect()
    shown = [w.message.id for w in view.widgets if w.isVisible() and w.geometry().intersects(vp)]
    assert found_message in shown, (found_message, shown)

    # clearing the search: every chat, one line each, no snippets
    side.search.clear()
    assert len(h.chat.conversations.items()) == 3
    assert all(side.snippet(r) == "" for r in range(3))


def test_search_stays_quick_on_200_chats_of_50_messages(tmp_path):
    store = ConversationStore(tmp_path / "conversations.sqlite3")
    rows = [("user" if i % 2 == 0 else "assistant", FILLER * 3 + f"message {i}", {}) for i in range(50)]
    for n in range(200):
        c = store.create(f"Chat {n}")
        store.add_messages(c.id, rows if n % 20 else rows[:-1] + [("user", "the quokka smiled at me", {})])
    timings = {}
    for query in ("quokka", "harbour", "zzz-not-there"):
        t0 = time.perf_counter()
        found = store.conversations(query)
        hits = store.search_hits(query)
        timings[query] = time.perf_counter() - t0
        if query == "quokka":
            assert len(found) == 10 and len(hits) == 10
        if query == "harbour":
            assert len(found) == 200 and len(hits) == 200
    print("search of 200 chats x 50 messages:", {q: f"{s * 1000:.1f} ms" for q, s in timings.items()})
    assert max(timings.values()) < 0.5, timings
    store.close()
