"""The document library as a Qt service: add files (one by one, or every supported file in a
folder), attach them to chats, and the chat's hook that puts their passages into a request."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.api_client import ApiClient
from app.conversations import Conversation, ConversationStore
from app.documents import TEXT_SUFFIXES, Document, DocumentError, DocumentLibrary, augment, http_embedder
from app.errors import ApiProblem, UserError

DEFAULT_CONTEXT = 2048
#: the files a folder may add (text, Markdown, code, PDF: what the library reads)
FOLDER_SUFFIXES = frozenset(TEXT_SUFFIXES | {".pdf"})
#: at most this many files from one folder (the first ones, by path)
MAX_FOLDER_FILES = 200
#: a file in a folder bigger than this is skipped (a dump or a log, not a document to read)
MAX_FOLDER_FILE_BYTES = 20_000_000


@dataclass
class FolderScan:
    """What a folder holds for the library: the files to add, and what was skipped and why."""

    files: list[Path] = field(default_factory=list)
    hidden: int = 0  #: hidden files and folders (a name that starts with a dot), not looked into
    unsupported: list[Path] = field(default_factory=list)  #: files of a type the library does not read
    too_big: list[Path] = field(default_factory=list)  #: over ``MAX_FOLDER_FILE_BYTES``
    unreadable: list[Path] = field(default_factory=list)  #: could not even be listed (permissions)
    more: bool = False  #: there were more supported files than ``MAX_FOLDER_FILES``

    def skipped(self, limit: int = MAX_FOLDER_FILES, max_bytes: int = MAX_FOLDER_FILE_BYTES) -> list[str]:
        """What was left out, one phrase each, in words."""
        out = []
        if self.more:
            out.append(f"more than {limit} files: only the first {limit} were added")
        if self.too_big:
            out.append(f"{_count(len(self.too_big), 'file')} over {max_bytes // 1_000_000} MB "
                       f"({_names(self.too_big)})")
        if self.unsupported:
            kinds = sorted({p.suffix.lower() or "no extension" for p in self.unsupported})
            shown = ", ".join(kinds[:6]) + (", …" if len(kinds) > 6 else "")
            out.append(f"{_count(len(self.unsupported), 'file')} of a type Hearth does not read ({shown})")
        if self.hidden:
            out.append(f"{_count(self.hidden, 'hidden file or folder', 'hidden files and folders')}")
        if self.unreadable:
            out.append(f"{_count(len(self.unreadable), 'folder')} that could not be opened "
                       f"({_names(self.unreadable)})")
        return out


def _count(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _names(paths: list[Path], most: int = 3) -> str:
    names = ", ".join(p.name for p in paths[:most])
    return names + (f" and {len(paths) - most} more" if len(paths) > most else "")


def scan_folder(folder: str | Path, limit: int = MAX_FOLDER_FILES,
                max_bytes: int = MAX_FOLDER_FILE_BYTES) -> FolderScan:
    """The supported files in ``folder`` and its subfolders, by path, at most ``limit`` of them;
    hidden files and folders are not looked into, links to folders not followed."""
    scan = FolderScan()
    root = Path(folder)

    def failed(e: OSError) -> None:
        scan.unreadable.append(Path(e.filename or root))

    for here, dirs, files in os.walk(root, onerror=failed):
        kept = sorted(d for d in dirs if not d.startswith("."))
        scan.hidden += len(dirs) - len(kept)
        dirs[:] = kept  # os.walk goes only into these, in this order
        for name in sorted(files):
            path = Path(here) / name
            if name.startswith("."):
                scan.hidden += 1
            elif path.suffix.lower() not in FOLDER_SUFFIXES:
                scan.unsupported.append(path)
            elif len(scan.files) >= limit:
                scan.more = True
                return scan
            else:
                try:
                    size = path.stat().st_size
                except OSError:
                    scan.unreadable.append(path)
                    continue
                if size > max_bytes:
                    scan.too_big.append(path)
                else:
                    scan.files.append(path)
    return scan


@dataclass
class FolderReport:
    """A folder added to the library: what joined it, what failed, what was skipped."""

    folder: Path
    added: list[Document] = field(default_factory=list)
    failed: list[Path] = field(default_factory=list)  #: the file could not be read or indexed (an error said why)
    skipped: list[str] = field(default_factory=list)  #: ``FolderScan.skipped``

    def summary(self) -> str:
        """In words: "Added 3 documents from “notes”. Skipped 2 files of a type …"."""
        name = self.folder.name or str(self.folder)
        if not self.added and not self.failed and not self.skipped:
            return f"“{name}” has no files to add."
        text = (f"Added {_count(len(self.added), 'document')} from “{name}”." if self.added
                else f"Nothing was added from “{name}”.")
        if self.failed:
            text += f" {_count(len(self.failed), 'file')} could not be added ({_names(self.failed)})."
        if self.skipped:
            text += " Skipped " + "; ".join(self.skipped) + "."
        return text


class DocumentsService(QObject):
    library_changed = Signal()
    error = Signal(object)  # UserError
    #: a file being indexed: its name, passages embedded, passages in all (done == total: finished;
    #: total 0: it ended without joining the library)
    indexing = Signal(str, int, int)
    #: a folder was added: what joined the library and what was skipped, in words (``FolderReport.summary``)
    folder_added = Signal(str)

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

    async def add_folder(self, folder: str | Path, conversation: Conversation | None = None) -> FolderReport:
        """Add every supported file in ``folder`` and its subfolders (see ``scan_folder``), one
        after another through ``add``, so each is indexed, attached and fails as a single file
        does; ``folder_added`` then says what was added and what was skipped and why."""
        import asyncio

        scan = await asyncio.to_thread(scan_folder, folder)  # a big tree takes a while to list
        report = FolderReport(Path(folder), skipped=scan.skipped())
        for path in scan.files:
            doc = await self.add(path, conversation)
            if doc is None:
                report.failed.append(path)
            else:
                report.added.append(doc)
        self.folder_added.emit(report.summary())
        return report

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
