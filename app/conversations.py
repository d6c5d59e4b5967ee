"""Conversations and their messages in SQLite, in the data directory; they survive restarts.

The database is owner-only (0600, and so are SQLite's -wal and -shm files, which take its
mode). A database that cannot be opened or fails SQLite's quick check never stops the app:
it is moved aside (``conversations.sqlite3.corrupt-TIMESTAMP``), the rows that can still be
read are copied into a new one, and ``problem`` says what happened for the app to show.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    model TEXT NOT NULL DEFAULT '',
    system_prompt TEXT NOT NULL DEFAULT '',
    sampling TEXT NOT NULL DEFAULT '{}',
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}',
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
"""


@dataclass(slots=True)
class Sampling:
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 1024
    seed: int | None = None

    def to_request(self) -> dict:
        body = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}
        if self.seed is not None:
            body["seed"] = self.seed
        return body

    @classmethod
    def from_dict(cls, d: dict) -> "Sampling":
        s = cls()
        for k in ("temperature", "top_p", "max_tokens", "seed"):
            if k in d:
                setattr(s, k, d[k])
        return s


@dataclass(slots=True)
class Conversation:
    id: int
    title: str
    model: str = ""
    system_prompt: str = ""
    sampling: Sampling = field(default_factory=Sampling)
    updated: float = 0.0
    #: per-chat choices: ``ctx`` (context length), ``tools`` (offer MCP tools), ``tool_choice``,
    #: ``allowed_tools`` (run without asking in this chat), ``documents`` (attached document ids)
    options: dict = field(default_factory=dict)


@dataclass(slots=True)
class Message:
    id: int
    role: str  # "user" or "assistant"
    content: str
    meta: dict = field(default_factory=dict)  # model, tokens_per_s, ttft_s, cached_tokens, finish, ...


log = logging.getLogger("hearth.app")
_TABLES = {"conversations": ("id", "title", "model", "system_prompt", "sampling", "created", "updated"),
           "messages": ("id", "conversation_id", "role", "content", "meta", "created")}


def _open(path: Path) -> sqlite3.Connection:
    if not path.exists():
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))  # created owner-only, not by the umask
    if os.name == "posix":
        os.chmod(path, 0o600)
    db = sqlite3.connect(str(path))
    try:
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("PRAGMA journal_mode = WAL")
        db.executescript(_SCHEMA)
        if "options" not in {r[1] for r in db.execute("PRAGMA table_info(conversations)")}:
            with db:  # a history from before per-chat options
                db.execute("ALTER TABLE conversations ADD COLUMN options TEXT NOT NULL DEFAULT '{}'")
        check = db.execute("PRAGMA quick_check").fetchone()
        if not check or check[0] != "ok":
            raise sqlite3.DatabaseError(f"quick_check: {check[0] if check else 'no answer'}")
    except sqlite3.DatabaseError:
        db.close()
        raise
    return db


def _salvage(old: Path, db: sqlite3.Connection) -> int:
    """Copy the rows a damaged database still gives into ``db``; returns how many."""
    copied = 0
    try:
        src = sqlite3.connect(f"file:{old}?mode=ro", uri=True)
    except sqlite3.DatabaseError:
        return 0
    try:
        for table, cols in _TABLES.items():
            try:
                rows = src.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY id").fetchall()
            except sqlite3.DatabaseError:
                continue
            with db:
                db.executemany(f"INSERT OR IGNORE INTO {table} ({', '.join(cols)}) VALUES "
                               f"({', '.join('?' * len(cols))})", rows)
            copied += len(rows)
    except sqlite3.DatabaseError as e:
        log.warning("stopped copying from the damaged chat database: %s", e)
    finally:
        src.close()
    return copied


class ConversationStore:
    """All reads and writes of the chat history. Each write commits: a crash loses nothing saved."""

    def __init__(self, path: Path) -> None:
        from runtime.private_files import move_aside, private_dir

        private_dir(path.parent)
        self.path = path
        self.problem: str | None = None  #: the database was damaged and set aside (for the user)
        try:
            self.db = _open(path)
        except sqlite3.DatabaseError as e:
            aside = move_aside(path, str(e))
            for extra in ("-wal", "-shm"):  # SQLite's companions belong to the damaged file
                companion = path.with_name(path.name + extra)
                if companion.exists():
                    os.replace(companion, aside.with_name(aside.name + extra))
            self.db = _open(path)
            kept = _salvage(aside, self.db)
            self.problem = (f"The chat history could not be read ({e}); it was moved to {aside}"
                            + (f" and {kept} records that could still be read were kept." if kept
                               else " and a new history was started."))
            log.warning("%s", self.problem)

    def close(self) -> None:
        self.db.close()

    # conversations
    def create(self, title: str = "New chat", model: str = "", system_prompt: str = "",
               sampling: Sampling | None = None) -> Conversation:
        now = time.time()
        s = sampling or Sampling()
        with self.db:
            cur = self.db.execute(
                "INSERT INTO conversations (title, model, system_prompt, sampling, created, updated) "
                "VALUES (?, ?, ?, ?, ?, ?)", (title, model, system_prompt, json.dumps(_sampling_dict(s)), now, now))
        return Conversation(cur.lastrowid, title, model, system_prompt, s, now)

    def conversations(self, search: str = "") -> list[Conversation]:
        """Newest first; ``search`` matches titles and message text, case-insensitively."""
        sql = f"SELECT {_COLUMNS} FROM conversations"
        args: tuple = ()
        if search:
            like = f"%{search}%"
            sql += (" WHERE title LIKE ? OR id IN (SELECT conversation_id FROM messages WHERE content LIKE ?)")
            args = (like, like)
        rows = self.db.execute(sql + " ORDER BY updated DESC, id DESC", args).fetchall()
        return [_conversation(r) for r in rows]

    def get(self, conversation_id: int) -> Conversation | None:
        r = self.db.execute(f"SELECT {_COLUMNS} FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        return _conversation(r) if r else None

    def update(self, c: Conversation) -> None:
        c.updated = time.time()
        with self.db:
            self.db.execute("UPDATE conversations SET title = ?, model = ?, system_prompt = ?, sampling = ?, "
                            "updated = ?, options = ? WHERE id = ?",
                            (c.title, c.model, c.system_prompt, json.dumps(_sampling_dict(c.sampling)),
                             c.updated, json.dumps(c.options), c.id))

    def delete(self, conversation_id: int) -> None:
        with self.db:
            self.db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    # messages
    def messages(self, conversation_id: int) -> list[Message]:
        rows = self.db.execute("SELECT id, role, content, meta FROM messages WHERE conversation_id = ? "
                               "ORDER BY id", (conversation_id,)).fetchall()
        return [Message(r[0], r[1], r[2], json.loads(r[3])) for r in rows]

    def add_message(self, conversation_id: int, role: str, content: str, meta: dict | None = None) -> Message:
        now = time.time()
        with self.db:
            cur = self.db.execute("INSERT INTO messages (conversation_id, role, content, meta, created) "
                                  "VALUES (?, ?, ?, ?, ?)", (conversation_id, role, content,
                                                             json.dumps(meta or {}), now))
            self.db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (now, conversation_id))
        return Message(cur.lastrowid, role, content, dict(meta or {}))

    def update_message(self, m: Message) -> None:
        with self.db:
            self.db.execute("UPDATE messages SET content = ?, meta = ? WHERE id = ?",
                            (m.content, json.dumps(m.meta), m.id))

    def delete_messages_from(self, conversation_id: int, message_id: int) -> None:
        """Delete ``message_id`` and every later message of the conversation."""
        with self.db:
            self.db.execute("DELETE FROM messages WHERE conversation_id = ? AND id >= ?",
                            (conversation_id, message_id))


def _sampling_dict(s: Sampling) -> dict:
    return {"temperature": s.temperature, "top_p": s.top_p, "max_tokens": s.max_tokens, "seed": s.seed}


_COLUMNS = "id, title, model, system_prompt, sampling, updated, options"


def _conversation(r) -> Conversation:
    return Conversation(r[0], r[1], r[2], r[3], Sampling.from_dict(json.loads(r[4])), r[5], json.loads(r[6] or "{}"))
