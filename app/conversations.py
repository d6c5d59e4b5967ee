"""Conversations and their messages in SQLite, in the data directory; they survive restarts.

The messages of a chat form a tree: each follows a parent (``parent_id``; 0 for the first).
Regenerating an answer or editing a question adds a sibling instead of replacing it, so every
older version, and the conversation that went on from it, is kept. The chat shows one path
through the tree, from the first message down to its ``leaf`` (by default the newest message);
flipping to another version of a message moves the leaf to the newest message under it.

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
from typing import TypedDict, cast
from dataclasses import dataclass, field
from pathlib import Path

from runtime.sampling_params import DEFAULT_TOP_K

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


#: what a chat longer than the context sends, in the chat settings' words (the service's
#: ``context_overflow``)
OVERFLOW_POLICIES = {"truncate_middle": "Leave out the middle (keep the start and the latest)",
                     "rolling_window": "Leave out the oldest messages",
                     "stop": "Stop with an error"}


@dataclass(slots=True)
class Sampling:
    """A chat's sampling, by the API's own field names (``/v1/chat/completions``)."""

    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 1024
    seed: int | None = None
    top_k: int = DEFAULT_TOP_K  #: 0: off
    min_p: float = 0.0
    repeat_penalty: float = 1.0  #: 1: off
    stop: tuple[str, ...] = ()  #: the answer ends before any of these
    #: what the chat sends once it outgrows the model's context: ``truncate_middle`` (the system
    #: prompt and the first turn stay), ``rolling_window`` (the oldest turns go) or ``stop`` (an error)
    context_overflow: str = "truncate_middle"

    def to_request(self) -> dict:
        """The request's sampling fields: the four every chat sends, and the others where they
        differ from the service's own defaults (a remote engine that lacks one is not asked)."""
        body = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens,
                "context_overflow": self.context_overflow}
        if self.seed is not None:
            body["seed"] = self.seed
        plain = Sampling()
        for name in ("top_k", "min_p", "repeat_penalty"):
            if getattr(self, name) != getattr(plain, name):
                body[name] = getattr(self, name)
        if self.stop:
            body["stop"] = list(self.stop)
        return body

    @classmethod
    def from_dict(cls, d: dict) -> "Sampling":
        s = cls()
        for k in ("temperature", "top_p", "max_tokens", "seed", "top_k", "min_p", "repeat_penalty"):
            if k in d:
                setattr(s, k, d[k])
        if isinstance(d.get("stop"), list):
            s.stop = tuple(x for x in d["stop"] if isinstance(x, str) and x)
        if d.get("context_overflow") in OVERFLOW_POLICIES:
            s.context_overflow = d["context_overflow"]
        return s

    def to_dict(self) -> dict:
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens,
                "seed": self.seed, "top_k": self.top_k, "min_p": self.min_p, "repeat_penalty": self.repeat_penalty,
                "stop": list(self.stop), "context_overflow": self.context_overflow}


@dataclass(slots=True)
class Conversation:
    id: int
    title: str
    model: str = ""
    system_prompt: str = ""
    sampling: Sampling = field(default_factory=Sampling)
    updated: float = 0.0  #: when its last message was written (the chat list's order)
    #: per-chat choices: ``ctx`` (context length), ``tools`` (offer MCP tools), ``tool_choice``,
    #: ``allowed_tools`` (run without asking in this chat), ``documents`` (attached document ids)
    options: dict = field(default_factory=dict)


class MessageMeta(TypedDict, total=False):
    """What a message keeps beside its text (stored with it as JSON): every key optional."""

    #: an answer: the model that wrote it, how it ended (``stop``, ``length``, ``tool_calls``,
    #: ``interrupted``...), the error it met, its thinking, the calls it made (``ToolCall.to_meta``)
    model: str
    finish: str
    error: str
    reasoning: str
    tool_calls: list[dict]
    #: an answer's figures (``chat._numbers``) and the model's decode limit on this machine
    ttft_s: float
    tokens_per_s: float
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    acceptance_rate: float
    decode_limit_tps: float
    #: a question's attached files (``attachments.Attachment.to_meta``); an answer's document
    #: passages it was given (``documents``)
    attachments: list[dict]
    citations: list[dict]


def stored_meta(text: str) -> MessageMeta:
    """A message's meta as stored (JSON); an empty one where the column holds no object."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return MessageMeta()
    return cast(MessageMeta, value) if isinstance(value, dict) else MessageMeta()


@dataclass(slots=True)
class Message:
    id: int
    role: str  # "user" or "assistant"
    content: str
    meta: MessageMeta = field(default_factory=lambda: MessageMeta())
    parent_id: int = 0  #: the message it follows (0: the first of its chat)
    #: its place among the versions that follow the same message (1-based) and how many there
    #: are: a regenerated answer or an edited question keeps the older versions beside it
    variant: int = 1
    variants: int = 1


@dataclass(slots=True)
class SearchHit:
    """Where a chat search matched a chat's messages: the first message that contains the
    text, and a one-line snippet around the match, cut in three (before, match, after)."""

    message_id: int
    before: str
    match: str
    after: str

    @property
    def snippet(self) -> str:
        return self.before + self.match + self.after


#: about how many characters a search hit's snippet shows
SNIPPET_CHARS = 80


def _like(text: str) -> str:
    """A LIKE pattern that finds ``text`` anywhere (its own ``%`` and ``_`` taken literally)."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _collapse(text: str) -> str:
    """Runs of whitespace (newlines too) as one space, keeping a space at either end."""
    inner = " ".join(text.split())
    if not inner:
        return " " if text else ""
    return (" " if text[:1].isspace() else "") + inner + (" " if text[-1:].isspace() else "")


def snippet(content: str, query: str, width: int = SNIPPET_CHARS) -> tuple[str, str, str] | None:
    """A one-line snippet of ``content`` around the first case-insensitive match of ``query``,
    about ``width`` characters, whitespace collapsed, "…" where it was cut: (before, match,
    after); None where ``query`` is not in it (SQLite's LIKE folds only ASCII letters' case)."""
    import re

    m = re.search(re.escape(query), content, re.IGNORECASE)
    if m is None:
        return None
    # only the neighbourhood matters: a long message is not collapsed whole
    lo, hi = max(0, m.start() - 4 * width), min(len(content), m.end() + 4 * width)
    before = _collapse(content[lo:m.start()]).lstrip() if lo == 0 else _collapse(content[lo:m.start()])
    match = _collapse(m.group())
    after = _collapse(content[m.end():hi])
    after = after.rstrip() if hi == len(content) else after
    room = max(0, width - len(match))
    lead = min(len(before), max(room // 3, room - len(after)))
    cut_before, cut_after = lead < len(before) or lo > 0, False
    if lead < len(before):
        before = before[len(before) - lead:]
        space = before.find(" ")
        if 0 <= space < lead // 2:  # not half a word
            before = before[space + 1:]
    tail = room - len(before)
    if tail < len(after) or hi < len(content):
        cut_after = True
        after = after[:max(0, tail)]
        space = after.rfind(" ")
        if space > tail // 2:
            after = after[:space]
    return ("…" + before.lstrip() if cut_before else before), match, (after.rstrip() + "…" if cut_after else after)


log = logging.getLogger("hearth.app")
_TABLES = {"conversations": ("id", "title", "model", "system_prompt", "sampling", "created", "updated"),
           "messages": ("id", "conversation_id", "role", "content", "meta", "created")}
_TREE_COLUMNS = {"conversations": ("leaf",), "messages": ("parent_id",)}


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
        if "leaf" not in {r[1] for r in db.execute("PRAGMA table_info(conversations)")}:
            with db:  # a history from before versions: the newest message is the leaf
                db.execute("ALTER TABLE conversations ADD COLUMN leaf INTEGER NOT NULL DEFAULT 0")
        if "parent_id" not in {r[1] for r in db.execute("PRAGMA table_info(messages)")}:
            with db:  # a history from before versions: -1 until linked to the message before
                db.execute("ALTER TABLE messages ADD COLUMN parent_id INTEGER NOT NULL DEFAULT -1")
        _link_unparented(db)
        check = db.execute("PRAGMA quick_check").fetchone()
        if not check or check[0] != "ok":
            raise sqlite3.DatabaseError(f"quick_check: {check[0] if check else 'no answer'}")
    except sqlite3.DatabaseError:
        db.close()
        raise
    return db


def _link_unparented(db: sqlite3.Connection) -> None:
    """Messages without a parent (a history from before versions, or rows salvaged from one)
    follow the message before them in their chat: one straight line, as they were shown."""
    with db:
        db.execute("UPDATE messages SET parent_id = COALESCE((SELECT MAX(p.id) FROM messages p WHERE "
                   "p.conversation_id = messages.conversation_id AND p.id < messages.id), 0) "
                   "WHERE parent_id = -1")


def _salvage(old: Path, db: sqlite3.Connection) -> int:
    """Copy the rows a damaged database still gives into ``db``; returns how many."""
    copied = 0
    try:
        src = sqlite3.connect(f"file:{old}?mode=ro", uri=True)
    except sqlite3.DatabaseError:
        return 0
    try:
        for table, base in _TABLES.items():
            for cols in (base + _TREE_COLUMNS[table], base):  # the tree's columns, when it had them
                try:
                    rows = src.execute(f"SELECT {', '.join(cols)} FROM {table} ORDER BY id").fetchall()
                    break
                except sqlite3.DatabaseError:
                    rows = None
            if rows is None:
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
            _link_unparented(self.db)
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
                "VALUES (?, ?, ?, ?, ?, ?)", (title, model, system_prompt, json.dumps(s.to_dict()), now, now))
        return Conversation(inserted_id(cur), title, model, system_prompt, s, now)

    def conversations(self, search: str = "") -> list[Conversation]:
        """Newest first; ``search`` matches titles and message text, case-insensitively."""
        sql = f"SELECT {_COLUMNS} FROM conversations"
        args: tuple = ()
        if search:
            like = _like(search)
            sql += (" WHERE title LIKE ? ESCAPE '\\' OR id IN "
                    "(SELECT conversation_id FROM messages WHERE content LIKE ? ESCAPE '\\')")
            args = (like, like)
        rows = self.db.execute(sql + " ORDER BY updated DESC, id DESC", args).fetchall()
        return [_conversation(r) for r in rows]

    def search_hits(self, search: str) -> dict[int, SearchHit]:
        """Where ``search`` matches in the messages: for each chat with a message that contains
        it, the first such message and a one-line snippet around the match (a chat that matches
        by its title alone has none). One query: the first match per chat, then only those
        messages' text."""
        if not search:
            return {}
        rows = self.db.execute(
            "SELECT m.conversation_id, m.id, m.content FROM messages m JOIN "
            "(SELECT MIN(id) AS id FROM messages WHERE content LIKE ? ESCAPE '\\' GROUP BY conversation_id) f "
            "ON m.id = f.id", (_like(search),)).fetchall()
        hits = {}
        for cid, mid, content in rows:
            hit = snippet(content, search)
            if hit is not None:
                hits[cid] = SearchHit(mid, *hit)
        return hits

    def get(self, conversation_id: int) -> Conversation | None:
        r = self.db.execute(f"SELECT {_COLUMNS} FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        return _conversation(r) if r else None

    def update(self, c: Conversation) -> None:
        """Save a conversation's title, model and options. Its place in the list (``updated``: its
        last message) does not change: renaming a chat or picking its model does not move it."""
        with self.db:
            self.db.execute("UPDATE conversations SET title = ?, model = ?, system_prompt = ?, sampling = ?, "
                            "options = ? WHERE id = ?",
                            (c.title, c.model, c.system_prompt, json.dumps(c.sampling.to_dict()),
                             json.dumps(c.options), c.id))

    def delete(self, conversation_id: int) -> None:
        with self.db:
            self.db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    # messages
    def _rows(self, conversation_id: int) -> dict[int, Message]:
        rows = self.db.execute("SELECT id, role, content, meta, parent_id FROM messages WHERE conversation_id = ? "
                               "ORDER BY id", (conversation_id,)).fetchall()
        return {r[0]: Message(r[0], r[1], r[2], stored_meta(r[3]), r[4]) for r in rows}

    def _leaf(self, conversation_id: int, rows: dict[int, Message]) -> int:
        r = self.db.execute("SELECT leaf FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        leaf = r[0] if r else 0
        return leaf if leaf in rows else max(rows, default=0)

    def messages(self, conversation_id: int) -> list[Message]:
        """The chat as shown: the path from its first message to its leaf, each message with its
        place among its versions."""
        rows = self._rows(conversation_id)
        path = _path(rows, self._leaf(conversation_id, rows))
        children: dict[int, list[int]] = {}
        for m in rows.values():
            children.setdefault(m.parent_id, []).append(m.id)
        for m in path:
            siblings = children.get(m.parent_id, [m.id])
            m.variant, m.variants = siblings.index(m.id) + 1, len(siblings)
        return path

    def tree(self, conversation_id: int) -> list[Message]:
        """Every message of the chat, every version, in the order they were written."""
        return list(self._rows(conversation_id).values())

    def message_count(self, conversation_id: int) -> int:
        """How many messages the chat shows (its current path)."""
        return len(self.messages(conversation_id))

    def add_message(self, conversation_id: int, role: str, content: str, meta: dict | None = None,
                    parent_id: int | None = None) -> Message:
        """Add a message after ``parent_id`` (by default after the last one shown; 0: as a new
        first message); it becomes the chat's leaf."""
        now = time.time()
        if parent_id is None:
            path = self.messages(conversation_id)
            parent_id = path[-1].id if path else 0
        with self.db:
            cur = self.db.execute("INSERT INTO messages (conversation_id, role, content, meta, created, parent_id) "
                                  "VALUES (?, ?, ?, ?, ?, ?)", (conversation_id, role, content,
                                                                json.dumps(meta or {}), now, parent_id))
            self.db.execute("UPDATE conversations SET updated = ?, leaf = ? WHERE id = ?",
                            (now, cur.lastrowid, conversation_id))
        n = self.db.execute("SELECT COUNT(*) FROM messages WHERE conversation_id = ? AND parent_id = ?",
                            (conversation_id, parent_id)).fetchone()[0]
        return Message(inserted_id(cur), role, content, cast(MessageMeta, dict(meta or {})), parent_id, n, n)

    def add_messages(self, conversation_id: int, rows: list[tuple[str, str, dict]]) -> None:
        """Add many messages (role, content, meta) in one transaction, each after the one before:
        an imported chat."""
        now = time.time()
        path = self.messages(conversation_id)
        parent = path[-1].id if path else 0
        with self.db:
            for role, content, meta in rows:
                parent = inserted_id(self.db.execute(
                    "INSERT INTO messages (conversation_id, role, content, meta, created, parent_id) "
                    "VALUES (?, ?, ?, ?, ?, ?)", (conversation_id, role, content, json.dumps(meta), now, parent)))
            self.db.execute("UPDATE conversations SET updated = ?, leaf = ? WHERE id = ?",
                            (now, parent, conversation_id))

    def add_tree(self, conversation_id: int, rows: list[tuple[str, str, dict]], parents: list[int],
                 leaf: int = 0) -> None:
        """Add many messages with their versions in one transaction: ``parents[i]`` is the
        1-based place in ``rows`` of the message row ``i`` follows (0: a first message; always
        an earlier row), ``leaf`` the place of the last one shown (0: the last row)."""
        now = time.time()
        ids: list[int] = []
        with self.db:
            for (role, content, meta), parent in zip(rows, parents, strict=True):
                if not 0 <= parent <= len(ids):
                    raise ValueError(f"message {len(ids) + 1} follows {parent}, which is not written before it")
                ids.append(inserted_id(self.db.execute(
                    "INSERT INTO messages (conversation_id, role, content, meta, created, parent_id) "
                    "VALUES (?, ?, ?, ?, ?, ?)", (conversation_id, role, content, json.dumps(meta), now,
                                                  ids[parent - 1] if parent else 0))))
            shown = ids[leaf - 1] if 0 < leaf <= len(ids) else (ids[-1] if ids else 0)
            self.db.execute("UPDATE conversations SET updated = ?, leaf = ? WHERE id = ?",
                            (now, shown, conversation_id))

    def update_message(self, m: Message) -> None:
        with self.db:
            self.db.execute("UPDATE messages SET content = ?, meta = ? WHERE id = ?",
                            (m.content, json.dumps(m.meta), m.id))

    def switch_variant(self, conversation_id: int, message_id: int, step: int) -> int | None:
        """Show another version of ``message_id``: ``step`` places along its siblings (-1 the
        one before, +1 the one after). The chat then goes on with the newest message under that
        version. Returns the version's id, or None when there is none that way."""
        rows = self._rows(conversation_id)
        m = rows.get(message_id)
        if m is None:
            return None
        siblings = [x.id for x in rows.values() if x.parent_id == m.parent_id]
        i = siblings.index(m.id) + step
        if not 0 <= i < len(siblings):
            return None
        target = siblings[i]
        children: dict[int, list[int]] = {}
        for x in rows.values():
            children.setdefault(x.parent_id, []).append(x.id)
        newest, stack = target, [target]
        while stack:  # the newest message in the version's subtree
            n = stack.pop()
            newest = max(newest, n)
            stack.extend(children.get(n, ()))
        with self.db:
            self.db.execute("UPDATE conversations SET leaf = ? WHERE id = ?", (newest, conversation_id))
        return target

    def set_leaf(self, conversation_id: int, message_id: int) -> None:
        """Show the path that ends at ``message_id`` (0: the newest message)."""
        with self.db:
            self.db.execute("UPDATE conversations SET leaf = ? WHERE id = ?", (message_id, conversation_id))

    def delete_messages_from(self, conversation_id: int, message_id: int) -> None:
        """Delete ``message_id`` and everything that follows it (every version below it)."""
        rows = self._rows(conversation_id)
        gone, stack = [], [message_id]
        while stack:
            n = stack.pop()
            gone.append(n)
            stack.extend(x.id for x in rows.values() if x.parent_id == n)
        with self.db:
            self.db.executemany("DELETE FROM messages WHERE conversation_id = ? AND id = ?",
                                [(conversation_id, n) for n in gone])
            parent = rows[message_id].parent_id if message_id in rows else 0
            self.db.execute("UPDATE conversations SET leaf = ? WHERE id = ?", (parent, conversation_id))


def inserted_id(cur: sqlite3.Cursor) -> int:
    """The id of the row an INSERT through ``cur`` just wrote (``lastrowid``, which sqlite3 types
    as optional: it is None only before any INSERT)."""
    row_id = cur.lastrowid
    assert row_id is not None
    return row_id


def _path(rows: dict[int, Message], leaf: int) -> list[Message]:
    out, seen = [], set()
    while leaf in rows and leaf not in seen:
        seen.add(leaf)
        out.append(rows[leaf])
        leaf = rows[leaf].parent_id
    out.reverse()
    return out


_COLUMNS = "id, title, model, system_prompt, sampling, updated, options"


def _conversation(r) -> Conversation:
    return Conversation(r[0], r[1], r[2], r[3], Sampling.from_dict(json.loads(r[4])), r[5], json.loads(r[6] or "{}"))
