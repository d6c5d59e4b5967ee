"""Stored responses (``store: true``) for ``previous_response_id``, ``GET`` and ``DELETE``.

One JSON file per response under ``<data dir>/responses/``: the response object as the API
returned it, and the conversation that led to it (the internal messages in the shape chat
templates read, the reply included, the instructions not: a continued response takes its own),
owner-only (0600 in a 0700 folder). Bounded four ways: at most
``max_count`` files and ``max_bytes`` in all (oldest go first), at most ``client_count`` of them
stored by one client (``security.client_id``; its file name carries a tag of the client, so that
storing a thousand responses of its own pushes out only the client's own oldest, never another
client's), none older than ``retention_s``. Ids are checked against the shape Hearth gives them,
so a request can never name a path.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

from runtime.private_files import private_dir, write_private
from runtime.server.generate.request import Message, ToolCall

ID_RE = re.compile(r"resp_[0-9a-f]{32}")
DEFAULT_MAX_COUNT = 1000
#: responses one client may keep stored: a quarter of the store
DEFAULT_CLIENT_COUNT = 250
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_RETENTION_S = 30 * 24 * 3600.0


@dataclass(slots=True)
class StoredResponse:
    response: dict
    conversation: list[Message]


def _message(d: dict) -> Message:
    """A stored message (``Message.template``'s shape; arguments stored as JSON text are read too)."""
    calls = []
    for c in d.get("tool_calls") or []:
        fn = c["function"]
        arguments = fn.get("arguments") or {}
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except (ValueError, RecursionError):
                arguments = {}
        calls.append(ToolCall(c.get("id") or "", fn["name"], arguments if isinstance(arguments, dict) else {}))
    return Message(d["role"], d.get("content") or "", calls, d.get("tool_call_id"), d.get("name"),
                   d.get("reasoning_content"))


class ResponseStore:
    def __init__(self, root: Path, *, max_count: int = DEFAULT_MAX_COUNT, max_bytes: int = DEFAULT_MAX_BYTES,
                 retention_s: float = DEFAULT_RETENTION_S, client_count: int = DEFAULT_CLIENT_COUNT) -> None:
        self.root = root
        self.max_count, self.max_bytes, self.retention_s = max_count, max_bytes, retention_s
        self.client_count = client_count

    def _path(self, rid: str) -> Path | None:
        """The stored file of ``rid`` (``resp_<id>.json``, or ``resp_<id>~<client tag>.json``), or
        None when there is none or ``rid`` is not an id."""
        if not ID_RE.fullmatch(rid):
            return None
        try:
            return next(iter(self.root.glob(f"{rid}*.json")), None)
        except OSError:
            return None

    def put(self, rid: str, response: dict, conversation: list[Message], client: str = "") -> None:
        if not ID_RE.fullmatch(rid):
            raise ValueError(f"not a response id: {rid!r}")
        tag = client_tag(client)
        private_dir(self.root)  # the conversations are the user's: owner-only, like the chat database
        write_private(self.root / f"{rid}~{tag}.json", json.dumps(
            {"response": response, "conversation": [m.template() for m in conversation]}, ensure_ascii=False))
        self.prune()

    def get(self, rid: str) -> StoredResponse | None:
        path = self._path(rid)
        if path is None:
            return None
        try:
            if time.time() - path.stat().st_mtime > self.retention_s:
                path.unlink(missing_ok=True)
                return None
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("response"), dict):
            return None
        try:
            conversation = [_message(m) for m in data.get("conversation") or []]
        except (KeyError, TypeError, AttributeError):  # not a file this store wrote
            return None
        return StoredResponse(data["response"], conversation)

    def delete(self, rid: str) -> bool:
        path = self._path(rid)
        if path is None or not path.exists():
            return False
        path.unlink(missing_ok=True)
        return True

    def prune(self) -> int:
        """Delete expired responses, then the oldest beyond the count and size bounds; how many went."""
        try:
            entries = [(p.stat(), p) for p in self.root.glob("resp_*.json")]
        except OSError:
            return 0
        entries.sort(key=lambda e: e[0].st_mtime, reverse=True)  # newest first
        now, total, kept, removed = time.time(), 0, 0, 0
        per_client: dict[str, int] = {}
        for st, p in entries:
            tag = p.stem.partition("~")[2]
            mine = per_client.get(tag, 0) if tag else 0
            if (now - st.st_mtime > self.retention_s or kept + 1 > self.max_count
                    or total + st.st_size > self.max_bytes or mine + 1 > self.client_count):
                p.unlink(missing_ok=True)
                removed += 1
            else:
                total += st.st_size
                kept += 1
                per_client[tag] = mine + 1
        return removed


def client_tag(client: str) -> str:
    """A short tag of a client's identity for a file name (never the identity itself)."""
    return hashlib.blake2b(client.encode(), digest_size=6, person=b"hearth-client").hexdigest()
