"""The chat database: owner-only, and a damaged one never stops the app (moved aside, the
readable conversations kept, a message for the user)."""

from __future__ import annotations

import os
import sqlite3
import stat

from app.conversations import ConversationStore


def test_the_database_is_owner_only(tmp_path):
    old = os.umask(0o022)
    try:
        store = ConversationStore(tmp_path / "data" / "conversations.sqlite3")
        c = store.create("hello")
        store.add_message(c.id, "user", "hi")
        for name in ("conversations.sqlite3", "conversations.sqlite3-wal"):
            path = tmp_path / "data" / name
            if path.exists():
                assert stat.S_IMODE(path.stat().st_mode) == 0o600, name
        assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
        assert store.problem is None
        store.close()
    finally:
        os.umask(old)


def test_a_garbage_database_is_moved_aside_and_a_new_one_started(tmp_path):
    path = tmp_path / "conversations.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    store = ConversationStore(path)
    assert store.problem and "moved to" in store.problem
    assert store.conversations() == []
    assert store.create("works again").id == 1
    aside = list(tmp_path.glob("conversations.sqlite3.corrupt-*"))
    assert aside and aside[0].read_bytes().startswith(b"this is not a database")
    store.close()


def test_a_database_failing_its_check_keeps_what_can_be_read(tmp_path):
    path = tmp_path / "conversations.sqlite3"
    store = ConversationStore(path)
    c = store.create("kept")
    store.add_message(c.id, "user", "still here")
    store.close()
    db = sqlite3.connect(path)  # damage an index: the table rows stay readable, quick_check fails
    db.execute("PRAGMA writable_schema = ON")
    page = db.execute("SELECT rootpage FROM sqlite_master WHERE name = 'messages_by_conversation'").fetchone()[0]
    db.commit()
    db.close()
    raw = bytearray(path.read_bytes())
    size = 4096 if len(raw) % 4096 == 0 else 1024
    start = (page - 1) * size
    raw[start + 8:start + 64] = b"\xff" * 56
    path.write_bytes(bytes(raw))
    store = ConversationStore(path)
    assert store.problem and "records that could still be read were kept" in store.problem
    assert [x.title for x in store.conversations()] == ["kept"]
    assert [m.content for m in store.messages(c.id)] == ["still here"]
    store.close()
