"""A folder of documents (real app, offscreen): "Add folder…" in the library adds every supported
file in a folder and its subfolders through the same path as single files, attached to the chat;
hidden files and folders, unsupported types, files over the size limit and files past the cap
are skipped and the dialog says which and why; without the embedding service each file fails
as a single file does, in words."""

from __future__ import annotations

import hashlib

from app.documents_service import FolderScan, scan_folder
from app.ui.documents_ui import LibraryDialog
from runtime.server.launcher import free_port


async def word_vectors(texts: list[str]) -> list[list[float]]:
    """A stand-in for the embedding model (the service is not started here): a bag of hashed words."""
    out = []
    for t in texts:
        v = [0.0] * 64
        for w in t.lower().split():
            v[hashlib.blake2b(w.encode(), digest_size=2).digest()[0] % 64] += 1.0
        out.append(v)
    return out


def _tree(root):
    (root / "notes").mkdir(parents=True)
    (root / "notes" / "deep").mkdir()
    (root / ".git").mkdir()
    (root / "readme.md").write_text("# The project\n\nIt reads documents.\n")
    (root / "notes" / "pump.txt").write_text("The pump must stay below four bar of pressure.\n")
    (root / "notes" / "deep" / "code.py").write_text("def pump():\n    return 'four bar'\n")
    (root / ".hidden.md").write_text("secret\n")
    (root / ".git" / "config.txt").write_text("not a document\n")
    (root / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    (root / "archive.zip").write_bytes(b"PK\x03\x04" + bytes(100))
    (root / "empty.txt").write_text("")


def test_a_folder_scan_keeps_supported_files_and_says_what_it_skipped(tmp_path):
    _tree(tmp_path)
    scan = scan_folder(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in scan.files] == [
        "empty.txt", "readme.md", "notes/pump.txt", "notes/deep/code.py"]
    assert scan.hidden == 2 and sorted(p.name for p in scan.unsupported) == ["archive.zip", "photo.png"]
    words = "; ".join(scan.skipped())
    assert "2 files of a type Hearth does not read (.png, .zip)" in words, words
    assert "2 hidden files and folders" in words, words
    # the caps: a file over the size limit and files past the count are named
    (tmp_path / "notes" / "big.log").write_text("x" * 2000)
    capped = scan_folder(tmp_path, limit=2, max_bytes=1000)
    assert len(capped.files) == 2 and capped.more
    words = "; ".join(capped.skipped(limit=2, max_bytes=1000))
    assert "more than 2 files: only the first 2 were added" in words, words
    big = scan_folder(tmp_path, max_bytes=1000)
    assert [p.name for p in big.too_big] == ["big.log"]
    assert FolderScan().skipped() == []


def test_add_folder_adds_each_file_to_the_library_and_the_chat(make_app, driver, tmp_path):
    h = make_app(free_port())
    root = tmp_path / "project"
    _tree(root)
    h.documents.embed = word_vectors
    dialog = LibraryDialog(h.chat, h.documents, h.spawn, h.window)
    assert dialog.add_folder_button.text() == "Add folder…"
    said: list[str] = []
    h.documents.folder_added.connect(said.append)
    errors: list = []
    h.documents.error.connect(errors.append)
    dialog.add_folder_path(str(root))  # what the button does once a folder is picked
    assert h.chat.current is not None, "a chat is opened for the documents"
    driver.until(lambda: said, 60, "the folder to be added")
    titles = sorted(d.title for d in h.documents.library.documents())
    assert titles == ["code.py", "pump.txt", "readme.md"], titles
    assert sorted(d.title for d in h.documents.attached(h.chat.current)) == titles
    assert dialog.list.count() == 3
    # the empty file failed as a single empty file does: an error in words
    assert len(errors) == 1 and "empty.txt is empty" in errors[0].detail, errors
    text = dialog.status.text()
    assert text.startswith("Added 3 documents from “project”."), text
    assert "1 file could not be added (empty.txt)" in text, text
    assert "2 files of a type Hearth does not read (.png, .zip)" in text, text
    assert "2 hidden files and folders" in text, text
    assert dialog.status.isVisibleTo(dialog)
    dialog.close()


def test_add_folder_without_the_embedding_service_says_so_for_each_file(make_app, driver, tmp_path):
    h = make_app(free_port())  # nothing listens there: indexing fails as for a single file
    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.md").write_text("alpha\n")
    (root / "b.txt").write_text("beta\n")
    dialog = LibraryDialog(h.chat, h.documents, h.spawn, h.window)
    said: list[str] = []
    h.documents.folder_added.connect(said.append)
    errors: list = []
    h.documents.error.connect(errors.append)
    dialog.add_folder_path(str(root))
    driver.until(lambda: said, 60, "the folder to be tried")
    assert h.documents.library.documents() == []
    assert len(errors) == 2 and all(e.title == "The document could not be indexed." for e in errors)
    assert said[0] == "Nothing was added from “notes”. 2 files could not be added (a.md, b.txt).", said
    dialog.close()


def test_a_folder_dropped_on_the_chat_goes_to_its_documents(make_app, driver, tmp_path):
    """A dropped folder is not a file to read into the message: its documents join the chat, as
    "Add folder…" adds them (a dropped file is still attached to the message)."""
    h = make_app(free_port())
    root = tmp_path / "project"
    _tree(root)
    h.documents.embed = word_vectors
    said: list[str] = []
    h.documents.folder_added.connect(said.append)
    note = tmp_path / "note.txt"
    note.write_text("A note for this message only.\n")
    h.chat_page.attach_files([str(root), str(note)])
    driver.until(lambda: said and h.chat_page.pending, 60, "the folder to be added and the file attached")
    assert sorted(d.title for d in h.documents.attached(h.chat.current)) == ["code.py", "pump.txt", "readme.md"]
    assert [a.name for a in h.chat_page.pending] == ["note.txt"]
