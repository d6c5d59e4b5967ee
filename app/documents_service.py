"""The document library as a Qt service: add files, attach them to chats, and the chat's hook
that puts their passages into a request."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.api_client import ApiClient
from app.conversations import Conversation, ConversationStore
from app.documents import Document, DocumentError, DocumentLibrary, augment, http_embedder
from app.errors import ApiProblem, UserError

DEFAULT_CONTEXT = 2048


class DocumentsService(QObject):
    library_changed = Signal()
    error = Signal(object)  # UserError
    #: a file being indexed: its name, passages embedded, passages in all (done == total: finished;
    #: total 0: it ended without joining the library)
    indexing = Signal(str, int, int)

    def __init__(self, client: ApiClient, path: Path, store: ConversationStore) -> None:
        super().__init__()
        self.client, self.store = client, store
        self.library = DocumentLibrary(path)
        self.embed = http_embedder(client.post)

    def close(self) -> None:
        self.library.close()

    async def add(self, path: str | Path, conversation: Conversation | None = None) -> Document | None:
        """Add a file to the library (and attach it to ``conversation``); None, with the problem
        shown, when it cannot be read or embedded."""
        name = Path(path).name
        self.indexing.emit(name, 0, -1)  # reading the file: the total is not known yet
        try:
            doc = await self.library.add(Path(path), self.embed,
                                         progress=lambda done, total: self.indexing.emit(name, done, total))
        except DocumentError as e:
            self.indexing.emit(name, 0, 0)
            self.error.emit(UserError("The document could not be added.", str(e)))
            return None
        except ApiProblem as e:
            self.indexing.emit(name, 0, 0)
            self.error.emit(UserError("The document could not be indexed.", e.message,
                                      "The embedding model minilm-l6 runs in the Hearth service; start the server "
                                      "and try again."))
            return None
        except BaseException:
            self.indexing.emit(name, 0, 0)
            raise
        if conversation is not None:
            self.attach(conversation, doc.id)
        self.library_changed.emit()
        return doc

    def attached(self, c: Conversation | None) -> list[Document]:
        ids = (c.options.get("documents") or []) if c else []
        return [d for d in (self.library.get(i) for i in ids) if d is not None]

    def attach(self, c: Conversation, doc_id: int) -> None:
        ids = list(c.options.get("documents") or [])
        if doc_id not in ids:
            c.options["documents"] = ids + [doc_id]
            self.store.update(c)
            self.library_changed.emit()

    def detach(self, c: Conversation, doc_id: int) -> None:
        c.options["documents"] = [i for i in c.options.get("documents") or [] if i != doc_id]
        self.store.update(c)
        self.library_changed.emit()

    def delete(self, doc_id: int) -> None:
        self.library.delete(doc_id)
        self.library_changed.emit()

    async def context_tokens(self, c: Conversation) -> int:
        if c.options.get("ctx"):
            return int(c.options["ctx"])
        try:
            models = (await self.client.get("/v1/models")).get("data") or []
        except ApiProblem:
            return DEFAULT_CONTEXT
        want = c.model or next((m["id"] for m in models if m.get("loaded")), "")
        row = next((m for m in models if m.get("id") == want), None)
        return int(row.get("context_length") or DEFAULT_CONTEXT) if row else DEFAULT_CONTEXT

    async def augment(self, c: Conversation, body: dict) -> list[dict]:
        """The chat's hook: put the attached documents into ``body`` and return the citations."""
        ids = c.options.get("documents") or []
        body["messages"], citations = await augment(self.library, ids, body["messages"], self.embed,
                                                    await self.context_tokens(c))
        return citations
