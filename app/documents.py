"""Documents for chats: a library in the data directory, attached to any number of chats.

A file (text, Markdown, code, PDF through pypdf) is read, cut into overlapping chunks, and each
chunk is embedded through the service's own ``/v1/embeddings`` (``minilm-l6``), so nothing
leaves the machine. At question time the attached documents that fit the context go into the
prompt whole; otherwise the chunks nearest the question (numpy cosine over the stored vectors)
go in, numbered, and the answer keeps them as citations the user can open. No Qt here.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.conversations import inserted_id

EMBED_MODEL = "minilm-l6"
CHUNK_CHARS = 900
OVERLAP_CHARS = 150
TOP_K = 4
#: a passage scoring this far (cosine) below the best is left out: it only adds noise
SCORE_MARGIN = 0.2
#: characters per token, roughly, for deciding what fits (English prose with a BPE vocabulary)
CHARS_PER_TOKEN = 4
#: the share of the context documents may take (the rest: the chat and the answer)
DOCUMENT_SHARE = 0.5
TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst", ".csv", ".json", ".yaml", ".yml", ".toml", ".ini", ".log",
                 ".py", ".js", ".ts", ".tsx", ".jsx", ".c", ".h", ".cc", ".cpp", ".hpp", ".rs", ".go", ".java",
                 ".kt", ".swift", ".rb", ".php", ".sh", ".sql", ".html", ".css", ".xml", ".tex"}

Embed = Callable[[list[str]], Awaitable[list[list[float]]]]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    path TEXT NOT NULL,
    chars INTEGER NOT NULL,
    pages INTEGER NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    document_id INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL,
    page INTEGER,
    start INTEGER NOT NULL,
    text TEXT NOT NULL,
    vector BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_document ON chunks(document_id, idx);
"""


class DocumentError(Exception):
    """A file that cannot be read as a document; the message says why, in plain words."""


@dataclass(slots=True)
class Document:
    id: int
    title: str
    path: str
    chars: int
    pages: int


@dataclass(slots=True)
class Chunk:
    id: int
    document_id: int
    title: str
    page: int | None
    start: int
    text: str
    score: float = 0.0

    def citation(self) -> dict:
        return {"document_id": self.document_id, "chunk_id": self.id, "title": self.title, "page": self.page,
                "start": self.start, "text": self.text, "score": round(self.score, 4)}


def read_pages(path: Path) -> list[str]:
    """The text of a file, page by page (one page for anything but a PDF)."""
    suffix = path.suffix.lower()
    if suffix == ".pdf":
        try:
            from pypdf import PdfReader
            from pypdf.errors import PdfReadError
        except ImportError:
            raise DocumentError("PDF files need the pypdf package (pip install pypdf).") from None
        try:
            pages = [p.extract_text() or "" for p in PdfReader(str(path)).pages]
        except (PdfReadError, OSError, ValueError) as e:
            raise DocumentError(f"{path.name} could not be read as a PDF ({e}).") from None
        if not any(p.strip() for p in pages):
            raise DocumentError(f"{path.name} has no text layer (a scanned PDF?); Hearth reads text, not images.")
        return pages
    if suffix not in TEXT_SUFFIXES and suffix:
        raw = path.read_bytes()[:4096]
        if b"\0" in raw:
            raise DocumentError(f"{path.name} is not a text file; attach text, Markdown, code or PDF.")
    try:
        return [path.read_text(encoding="utf-8", errors="replace")]
    except OSError as e:
        raise DocumentError(f"{path.name} could not be read ({e.strerror or e}).") from None


def chunk_pages(pages: list[str], size: int = CHUNK_CHARS, overlap: int = OVERLAP_CHARS) -> list[tuple[int | None, int, str]]:
    """(page, start offset in the page, text) chunks of about ``size`` characters, cut at a
    paragraph, line or sentence end where one is near, overlapping by ``overlap``."""
    out = []
    numbered = len(pages) > 1
    for n, text in enumerate(pages, 1):
        pos = 0
        while pos < len(text):
            end = min(len(text), pos + size)
            if end < len(text):
                window = text[pos + size // 2:end]
                for sep in ("\n\n", "\n", ". "):
                    cut = window.rfind(sep)
                    if cut >= 0:
                        end = pos + size // 2 + cut + len(sep)
                        break
            piece = text[pos:end].strip()
            if piece:
                out.append((n if numbered else None, pos, piece))
            if end >= len(text):
                break
            pos = max(end - overlap, pos + 1)
    return out


class DocumentLibrary:
    """The documents and their chunk vectors, in SQLite in the data directory (owner-only)."""

    def __init__(self, path: Path) -> None:
        from runtime.private_files import private_dir

        private_dir(path.parent)
        if not path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        self.path = path
        self.db = sqlite3.connect(str(path))
        self.db.execute("PRAGMA foreign_keys = ON")
        self.db.executescript(_SCHEMA)

    def close(self) -> None:
        self.db.close()

    async def add(self, path: Path, embed: Embed, title: str | None = None,
                  progress: Callable[[int, int], None] | None = None) -> Document:
        """Read, chunk and embed a file; it joins the library. ``progress(done, total)`` hears
        how many passages are embedded, after each batch (a long PDF takes minutes)."""
        import asyncio

        path = Path(path)
        pages = await asyncio.to_thread(read_pages, path)  # a PDF's text takes seconds: off the loop
        chunks = chunk_pages(pages)
        if not chunks:
            raise DocumentError(f"{path.name} is empty.")
        vectors = []
        if progress is not None:
            progress(0, len(chunks))
        for i in range(0, len(chunks), 32):
            vectors += await embed([c[2] for c in chunks[i:i + 32]])
            if progress is not None:
                progress(min(i + 32, len(chunks)), len(chunks))
        matrix = _normalised(np.asarray(vectors, dtype=np.float32))
        with self.db:
            cur = self.db.execute("INSERT INTO documents (title, path, chars, pages, created) VALUES (?, ?, ?, ?, ?)",
                                  (title or path.name, str(path), sum(len(p) for p in pages), len(pages), time.time()))
            doc_id = inserted_id(cur)
            self.db.executemany("INSERT INTO chunks (document_id, idx, page, start, text, vector) VALUES (?, ?, ?, ?, ?, ?)",
                                [(doc_id, i, page, start, text, matrix[i].tobytes())
                                 for i, (page, start, text) in enumerate(chunks)])
        doc = self.get(doc_id)
        assert doc is not None  # written just now
        return doc

    def documents(self) -> list[Document]:
        return [Document(*r) for r in self.db.execute(
            "SELECT id, title, path, chars, pages FROM documents ORDER BY created DESC, id DESC")]

    def get(self, doc_id: int) -> Document | None:
        r = self.db.execute("SELECT id, title, path, chars, pages FROM documents WHERE id = ?", (doc_id,)).fetchone()
        return Document(*r) if r else None

    def delete(self, doc_id: int) -> None:
        with self.db:
            self.db.execute("DELETE FROM documents WHERE id = ?", (doc_id,))

    def chunks(self, doc_ids: list[int]) -> list[Chunk]:
        if not doc_ids:
            return []
        marks = ",".join("?" * len(doc_ids))
        return [Chunk(*r) for r in self.db.execute(
            f"SELECT c.id, c.document_id, d.title, c.page, c.start, c.text FROM chunks c JOIN documents d "
            f"ON d.id = c.document_id WHERE c.document_id IN ({marks}) ORDER BY c.document_id, c.idx", doc_ids)]

    def full_text(self, doc_id: int) -> str:
        """The document's text from its chunks (overlaps removed)."""
        rows = self.db.execute("SELECT page, start, text FROM chunks WHERE document_id = ? ORDER BY idx",
                               (doc_id,)).fetchall()
        return "\n\n".join(r[2] for r in rows)

    async def search(self, query: str, doc_ids: list[int], embed: Embed, k: int = TOP_K) -> list[Chunk]:
        """The ``k`` chunks of ``doc_ids`` nearest the query (cosine), best first."""
        if not doc_ids:
            return []
        marks = ",".join("?" * len(doc_ids))
        rows = self.db.execute(
            f"SELECT c.id, c.document_id, d.title, c.page, c.start, c.text, c.vector FROM chunks c JOIN documents d "
            f"ON d.id = c.document_id WHERE c.document_id IN ({marks})", doc_ids).fetchall()
        if not rows:
            return []
        matrix = np.stack([np.frombuffer(r[6], dtype=np.float32) for r in rows])
        q = _normalised(np.asarray(await embed([query]), dtype=np.float32))[0]
        scores = matrix @ q
        out, seen = [], set()
        for i in np.argsort(-scores):  # best first; a passage repeated word for word counts once
            r = rows[i]
            if r[5] not in seen:
                seen.add(r[5])
                out.append(Chunk(r[0], r[1], r[2], r[3], r[4], r[5], score=float(scores[i])))
            if len(out) == k:
                break
        return out


def _normalised(m: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.where(norms == 0, 1, norms)


def context_block(passages: list[Chunk], whole: list[tuple[Document, str]]) -> str:
    """The system text that carries the documents into the prompt, passages numbered for citing."""
    lines = ["Answer using the documents below. Cite a passage by its number in brackets, like [1]."]
    for doc, text in whole:
        lines.append(f"\n<document title=\"{doc.title}\">\n{text}\n</document>")
    for i, c in enumerate(passages, 1):
        where = f"{c.title}" + (f", page {c.page}" if c.page else "")
        lines.append(f"\n[{i}] ({where})\n{c.text}")
    return "\n".join(lines)


async def augment(library: DocumentLibrary, doc_ids: list[int], messages: list[dict], embed: Embed,
                  context_tokens: int, k: int = TOP_K) -> tuple[list[dict], list[dict]]:
    """``messages`` with the documents put in before the last user message, and the citations.

    Documents that fit ``DOCUMENT_SHARE`` of ``context_tokens`` together go in whole (cited as the
    whole document); otherwise the ``k`` chunks nearest the question go in."""
    docs = [d for d in (library.get(i) for i in doc_ids) if d is not None]
    if not docs:
        return messages, []
    budget_chars = int(context_tokens * DOCUMENT_SHARE * CHARS_PER_TOKEN)
    question = next((m["content"] for m in reversed(messages) if m.get("role") == "user"), "")
    if isinstance(question, list):  # a message with images: its text parts
        question = " ".join(p.get("text", "") for p in question if isinstance(p, dict) and p.get("type") == "text")
    whole: list[tuple[Document, str]] = []
    passages: list[Chunk] = []
    if sum(d.chars for d in docs) <= budget_chars:
        whole = [(d, library.full_text(d.id)) for d in docs]
        citations = [{"document_id": d.id, "chunk_id": None, "title": d.title, "page": None, "start": 0,
                      "text": text, "whole": True} for d, text in whole]
    else:
        passages = await library.search(question, [d.id for d in docs], embed, k)
        passages = [c for c in passages if c.score >= passages[0].score - SCORE_MARGIN]
        while passages and sum(len(c.text) for c in passages) > budget_chars:
            passages.pop()
        citations = [c.citation() for c in passages]
    note = {"role": "system", "content": context_block(passages, whole)}
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=len(messages))
    return messages[:last_user] + [note] + messages[last_user:], citations


def http_embedder(post: Callable[..., Awaitable[dict]], model: str = EMBED_MODEL) -> Embed:
    """``embed(texts)`` through the service's OpenAI-shaped ``/v1/embeddings``."""

    async def embed(texts: list[str]) -> list[list[float]]:
        body = await post("/v1/embeddings", {"model": model, "input": texts}, timeout=120)
        data = sorted(body.get("data") or [], key=lambda d: d.get("index", 0))
        if len(data) != len(texts):
            raise DocumentError(f"the embedding model answered {len(data)} vectors for {len(texts)} texts")
        return [d["embedding"] for d in data]

    return embed
