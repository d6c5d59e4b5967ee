"""Documents in chats against a real service: chunks embedded through /v1/embeddings with the
embedded minilm-l6, the chunk with a known fact found and cited, a PDF written by hand, the
library kept across an app restart, and a short document put in the prompt whole."""

from __future__ import annotations

import random

import pytest

from app.conversations import Sampling
from app.documents import DocumentLibrary, augment, chunk_pages, http_embedder, read_pages

FACT = "The lighthouse keeper's cat is named Marmalade Ostrander and she weighs nine kilograms."
QUESTION = "What is the name of the lighthouse keeper's cat?"
TOPICS = ["The harbour froze early that winter and the ferries stopped running.",
          "Farmers along the river planted barley instead of wheat this year.",
          "The town council debated the new bridge for three long evenings.",
          "A storm in March tore the roof off the old grain warehouse.",
          "Children learned to sail in the shallow bay during the summer months.",
          "The railway station was repainted green and cream in the spring."]


def long_text() -> str:
    rnd = random.Random(5)
    paras = [" ".join(rnd.choice(TOPICS) for _ in range(6)) for _ in range(40)]
    paras.insert(20, FACT)
    return "\n\n".join(paras)


def tiny_pdf(path, pages: list[str]) -> None:
    """A valid PDF with one line of Helvetica text per page, written by hand."""
    objs = ["<< /Type /Catalog /Pages 2 0 R >>", None, "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for text in pages:
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        objs.append(f"<< /Length {len(stream)} >>\nstream\n{stream.decode()}\nendstream")
        content = len(objs)
        objs.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {content} 0 R "
                    f"/Resources << /Font << /F1 3 0 R >> >> >>")
        kids.append(f"{len(objs)} 0 R")
    objs[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>"
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    out += "".join(f"{o:010d} 00000 n \n" for o in offsets).encode()
    out += f"trailer\n<< /Size {len(objs) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    path.write_bytes(bytes(out))


def test_chunks_overlap_and_cover_the_text():
    text = long_text()
    chunks = chunk_pages([text], size=500, overlap=100)
    assert len(chunks) > 10 and all(len(c[2]) <= 500 for c in chunks)
    assert any(FACT in c[2] for c in chunks), "a sentence was cut apart by the chunker"
    assert chunks[-1][2].endswith(text.strip()[-40:])


@pytest.fixture()
def embed(service, driver, minilm_path):
    from app.api_client import ApiClient

    client = ApiClient(f"http://127.0.0.1:{service.port}")
    yield http_embedder(client.post)
    driver.run(client.close())


def test_the_chunk_with_the_fact_is_found_and_cited(embed, driver, tmp_path):
    doc = tmp_path / "harbour-history.md"
    doc.write_text(long_text())
    lib = DocumentLibrary(tmp_path / "documents.sqlite3")
    d = driver.run(lib.add(doc, embed))
    assert d.title == "harbour-history.md" and len(lib.chunks([d.id])) > 10
    hits = driver.run(lib.search(QUESTION, [d.id], embed, k=3))
    assert FACT in hits[0].text, [h.text[:80] for h in hits]
    messages = [{"role": "user", "content": QUESTION}]
    out, citations = driver.run(augment(lib, [d.id], messages, embed, context_tokens=1024, k=3))
    assert out[-1] == messages[-1] and out[-2]["role"] == "system" and "[1]" in out[-2]["content"]
    assert FACT in citations[0]["text"] and citations[0]["title"] == "harbour-history.md"
    assert citations[0]["start"] <= long_text().index(FACT) < citations[0]["start"] + len(citations[0]["text"]) + 1
    # a short document goes in whole when the context holds it
    short = tmp_path / "note.txt"
    short.write_text("The spare key is under the blue flowerpot.")
    s = driver.run(lib.add(short, embed))
    out, citations = driver.run(augment(lib, [s.id], messages, embed, context_tokens=1024))
    assert citations[0]["whole"] and "blue flowerpot" in out[-2]["content"]
    lib.close()


def test_a_pdf_is_read_page_by_page_and_cited_with_its_page(embed, driver, tmp_path):
    pdf = tmp_path / "manual.pdf"
    tiny_pdf(pdf, ["Chapter one covers installing the pump.", "The pump pressure must stay below 4 bar.",
                   "Chapter three covers cleaning the filter."])
    pages = read_pages(pdf)
    assert len(pages) == 3 and "4 bar" in pages[1]
    lib = DocumentLibrary(tmp_path / "documents.sqlite3")
    d = driver.run(lib.add(pdf, embed))
    assert d.pages == 3
    hits = driver.run(lib.search("What pressure must the pump stay below?", [d.id], embed, k=1))
    assert "4 bar" in hits[0].text and hits[0].page == 2
    lib.close()


def test_a_chat_with_a_document_cites_it_and_the_library_survives_a_restart(service, driver, make_app, tmp_path,
                                                                           minilm_path):
    doc = tmp_path / "harbour-history.md"
    doc.write_text(long_text())
    h = make_app(service.port, data_dir=tmp_path / "data")
    assert driver.run(h.start())
    h.chat.new_conversation()
    h.chat.configure(sampling=Sampling(temperature=0.0, top_p=1.0, max_tokens=24, seed=1))
    h.chat.current.options["ctx"] = 1024  # too small for the whole file: passages are retrieved
    added = driver.run(h.documents.add(doc, h.chat.current))
    assert added is not None and h.chat_page.document_strip.isVisibleTo(h.chat_page)
    h.chat_page.input.setPlainText(QUESTION)
    h.chat_page.send_button.click()
    driver.until(lambda: not h.chat.busy, 180, "the answer")
    answer = h.chat.messages.items()[-1]
    assert answer.meta["finish"] in ("stop", "length"), answer.meta
    assert FACT in answer.meta["citations"][0]["text"]
    widget = h.chat_page.view.widget_at(-1)
    assert widget.citations.isVisibleTo(h.chat_page.view) and "harbour-history.md" in widget.citations.text()
    widget.citations.linkActivated.emit("cite:0")
    assert FACT in h.chat_page.passage.text.toPlainText()
    conv_id = h.chat.current.id
    driver.run(h.shutdown())

    again = make_app(service.port, data_dir=tmp_path / "data")
    assert driver.run(again.start())
    assert [d.title for d in again.documents.library.documents()] == ["harbour-history.md"]
    again.chat.select(conv_id)
    assert [d.title for d in again.documents.attached(again.chat.current)] == ["harbour-history.md"]
    assert FACT in again.chat.messages.items()[-1].meta["citations"][0]["text"]

    # the library dialog: the document is ticked for this chat; unticking detaches it
    from PySide6.QtCore import Qt

    from app.ui.documents_ui import LibraryDialog

    lib = LibraryDialog(again.chat, again.documents, again.spawn, again.chat_page)
    item = lib.list.item(0)
    assert "harbour-history.md" in item.text() and item.checkState() == Qt.CheckState.Checked
    item.setCheckState(Qt.CheckState.Unchecked)
    assert again.documents.attached(again.chat.current) == []
    assert not again.chat_page.document_strip.isVisibleTo(again.chat_page)
    again.chat.new_conversation()  # another chat attaches the same library document
    lib.refresh()
    lib.list.item(0).setCheckState(Qt.CheckState.Checked)
    assert [d.title for d in again.documents.attached(again.chat.current)] == ["harbour-history.md"]
