"""Per-chat options (context, tools, allowed tools, documents) are kept with the conversation,
and a history written before they existed opens with none."""

from __future__ import annotations

import sqlite3

from app.conversations import ConversationStore


def test_options_survive_a_reopen_and_an_older_history_opens(tmp_path):
    path = tmp_path / "conversations.sqlite3"
    old = sqlite3.connect(path)
    old.executescript("""
        CREATE TABLE conversations (id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL,
            model TEXT NOT NULL DEFAULT '', system_prompt TEXT NOT NULL DEFAULT '',
            sampling TEXT NOT NULL DEFAULT '{}', created REAL NOT NULL, updated REAL NOT NULL);
        CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, conversation_id INTEGER NOT NULL,
            role TEXT NOT NULL, content TEXT NOT NULL, meta TEXT NOT NULL DEFAULT '{}', created REAL NOT NULL);
        INSERT INTO conversations (title, created, updated) VALUES ('Before options', 1, 1);
    """)
    old.commit()
    old.close()
    store = ConversationStore(path)
    (c,) = store.conversations()
    assert c.title == "Before options" and c.options == {} and store.problem is None
    c.options.update(ctx=4096, tools=False, allowed_tools=["add"], documents=[3])
    store.update(c)
    store.close()
    again = ConversationStore(path)
    assert again.get(c.id).options == {"ctx": 4096, "tools": False, "allowed_tools": ["add"], "documents": [3]}
    again.close()
