"""Chats leave and come back as files (real window offscreen, real files): Markdown to read,
JSON that imports into an equal chat; a file that is not a Hearth chat is refused in words."""

from __future__ import annotations

import json

from PySide6.QtWidgets import QFileDialog

from app.chat_export import MAX_FILE_BYTES, ChatFileError, parse
from app.conversations import Sampling
from runtime.server.launcher import free_port


def _chat(h):
    c = h.chat.new_conversation()
    h.chat.rename(c.id, "Decorators")
    h.chat.configure(model="smollm2-135m", system_prompt="Be brief.", sampling=Sampling(0.2, 0.9, 256, 7))
    h.chat.store.add_message(c.id, "user", "What is a decorator?")
    h.chat.store.add_message(c.id, "assistant", "A function that wraps another.\n\n```python\n@timed\ndef f(): ...\n```",
                             {"model": "smollm2-135m", "finish": "stop", "tokens_per_s": 70.5, "citations": [{"x": 1}]})
    h.chat.store.add_message(c.id, "user", "And a class decorator?")
    h.chat.store.add_message(c.id, "assistant", "The same idea, for cla", {"finish": "interrupted"})
    return c


def test_export_markdown_and_json_and_import_back(make_app, driver, tmp_path, monkeypatch):
    h = make_app(free_port())
    c = _chat(h)
    side = h.chat_page.sidebar
    md, js = tmp_path / "chat.md", tmp_path / "chat.json"
    for path, fmt in ((md, "markdown"), (js, "json")):
        monkeypatch.setattr(QFileDialog, "getSaveFileName", staticmethod(lambda *a, p=path, **k: (str(p), "")))
        side.export(c.id, fmt)
        driver.until(lambda p=path: p.exists() and p.stat().st_size > 0, 10, f"the {fmt} file")
    text = md.read_text()
    assert text.startswith("# Decorators") and "## You\n\nWhat is a decorator?" in text
    assert "```python\n@timed" in text and "cut off" in text and "Be brief." in text

    monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(lambda *a, **k: (str(js), "")))
    side.import_chat()
    driver.until(lambda: h.chat.current is not None and h.chat.current.id != c.id, 10, "the imported chat")
    new = h.chat.current
    assert (new.title, new.model, new.system_prompt) == ("Decorators", "smollm2-135m", "Be brief.")
    assert (new.sampling.temperature, new.sampling.max_tokens, new.sampling.seed) == (0.2, 256, 7)
    old_msgs, new_msgs = h.chat.store.messages(c.id), h.chat.store.messages(new.id)
    assert [(m.role, m.content) for m in new_msgs] == [(m.role, m.content) for m in old_msgs]
    assert new_msgs[1].meta["tokens_per_s"] == 70.5 and "citations" not in new_msgs[1].meta
    assert new_msgs[3].meta["finish"] == "interrupted"
    assert h.chat.conversations.row_of(new.id) == 0  # listed, at the top


def test_a_file_that_is_not_a_chat_is_refused_in_words(make_app, driver, tmp_path):
    h = make_app(free_port())
    bad = tmp_path / "notes.json"
    for content, words in (("{not json", "not a JSON file"), (json.dumps({"a": 1}), "not a chat exported by Hearth"),
                           (json.dumps({"format": "hearth-chat", "version": 1, "messages": [{"role": "system"}]}),
                            "message 1 needs")):
        bad.write_text(content)
        before = h.chat.conversations.rowCount()
        assert driver.run(h.chat.import_chat(str(bad))) is None
        assert h.chat.conversations.rowCount() == before
        assert words in h.window.banner.label.text(), h.window.banner.label.text()
    big = tmp_path / "big.json"
    with big.open("wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)
    assert driver.run(h.chat.import_chat(str(big))) is None and "at most" in h.window.banner.label.text()
    try:
        parse({"format": "hearth-chat", "version": 1, "messages": [{"role": "user", "content": "x"}] * 5001})
    except ChatFileError as e:
        assert "at most 5,000" in str(e)
    else:
        raise AssertionError("5,001 messages were accepted")


def _shape(store, conversation_id):
    """Every message of a chat as (role, content, the content of the one it follows), and the
    contents of the path shown with each message's place among its versions."""
    tree = store.tree(conversation_id)
    by_id = {m.id: m for m in tree}
    every = [(m.role, m.content, by_id[m.parent_id].content if m.parent_id else None) for m in tree]
    shown = [(m.content, m.variant, m.variants) for m in store.messages(conversation_id)]
    return every, shown


def test_json_carries_every_version_and_import_restores_them(make_app, driver, tmp_path, monkeypatch):
    h = make_app(free_port())
    store = h.chat.store
    c = h.chat.new_conversation()
    q1 = store.add_message(c.id, "user", "Name a colour.")
    store.add_message(c.id, "assistant", "Red.")
    a1b = store.add_message(c.id, "assistant", "Blue.", {"finish": "stop"}, parent_id=q1.id)  # regenerated
    store.add_message(c.id, "user", "Another?")
    store.add_message(c.id, "assistant", "Green.")
    q2b = store.add_message(c.id, "user", "Why blue?", parent_id=a1b.id)  # the question edited
    store.add_message(c.id, "assistant", "The sky.", parent_id=q2b.id)
    store.add_message(c.id, "user", "Name a shape.", parent_id=0)  # the first question edited
    store.set_leaf(c.id, store.tree(c.id)[4].id)  # shown: Name a colour / Blue. / Another? / Green.
    h.chat.select(c.id)
    before = _shape(store, c.id)
    assert before[1] == [("Name a colour.", 1, 2), ("Blue.", 2, 2), ("Another?", 1, 2), ("Green.", 1, 1)]

    js, md = tmp_path / "tree.json", tmp_path / "tree.md"
    assert driver.run(h.chat.export_chat(c.id, str(js), "json"))
    assert driver.run(h.chat.export_chat(c.id, str(md), "markdown"))
    data = json.loads(js.read_text())
    assert data["version"] == 2 and len(data["messages"]) == 8
    text = md.read_text()  # Markdown: only the conversation shown
    assert "Blue." in text and "Green." in text and "Red." not in text and "The sky." not in text

    new = driver.run(h.chat.import_chat(str(js)))
    assert new is not None and new.id != c.id
    assert _shape(store, new.id) == before
    # the versions work in the imported chat: the other answer and the conversation under it
    first_answer = store.messages(new.id)[1]
    store.switch_variant(new.id, first_answer.id, -1)
    assert [m.content for m in store.messages(new.id)] == ["Name a colour.", "Red."]

    # a file of version 1 (no versions) still imports, as one line
    old = {"format": "hearth-chat", "version": 1, "title": "Old", "messages": [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    (tmp_path / "old.json").write_text(json.dumps(old))
    imported = driver.run(h.chat.import_chat(str(tmp_path / "old.json")))
    assert [(m.content, m.variants) for m in store.messages(imported.id)] == [("Hi", 1), ("Hello", 1)]


def test_a_tree_that_loops_or_points_nowhere_is_refused(make_app, driver):
    def file(*messages, leaf=0):
        return {"format": "hearth-chat", "version": 2, "leaf": leaf,
                "messages": [{"id": i, "parent": p, "role": "user", "content": "x"} for i, p in messages]}

    for bad, words in ((file((1, 2), (2, 1)), "not a message written before it"),  # a loop
                       (file((1, 0), (2, 7)), "not a message written before it"),
                       (file((1, 0), (1, 0)), "its own \"id\""), (file((1, 0), (True, 1)), "its own \"id\""),
                       (file((1, 0), (2, "1")), "not a message written before it")):
        try:
            parse(bad)
        except ChatFileError as e:
            assert words in str(e), (bad, e)
        else:
            raise AssertionError(f"accepted: {bad}")
    ok = parse(file((5, 0), (9, 5), (3, 5), leaf=9))
    assert (ok.parents, ok.leaf) == ([0, 1, 1], 2)
