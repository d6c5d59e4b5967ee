"""Browse Hugging Face from the Models page: search GGUF repositories, read a model's card (what
the hub says of it: downloads, likes, licence, base model, languages, tags, last update, and the
repository's own card text as Markdown), pick a quantization by its size and download it.
Widgets only: the page asks the service and fills them."""

from __future__ import annotations

import html
import re

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox, QFrame, QHBoxLayout, QLabel, QLineEdit, QListView, QListWidget, QListWidgetItem, QPushButton, QSplitter,
    QTextBrowser, QVBoxLayout, QWidget,
)

from app.errors import UserError
from app.qt_models import format_size
from app.ui.markdown import size_headings

#: quantizations in the order most people want them: a good balance first
PREFERRED_QUANTS = ("Q4_K_M", "Q4_K_S", "Q5_K_M", "Q4_0", "Q6_K", "Q8_0", "Q3_K_M", "IQ4_XS", "Q2_K", "F16", "BF16")


def _count(n) -> str:
    if not isinstance(n, int):
        return "–"
    return f"{n / 1e6:.1f}M" if n >= 1_000_000 else f"{n / 1e3:.1f}k" if n >= 1000 else str(n)


def card_facts(hit: dict) -> list[tuple[str, str]]:
    """What the card shows of a search hit, from its tags and numbers."""
    tags = [t for t in hit.get("tags") or [] if isinstance(t, str)]
    by: dict[str, list[str]] = {}
    for t in tags:
        if ":" in t:
            k, v = t.split(":", 1)
            by.setdefault(k, []).append(v)
    plain = [t for t in tags if ":" not in t and t not in ("gguf",)]
    langs = [t for t in plain if len(t) == 2 and t.isalpha()]
    rows = [("Downloads", _count(hit.get("downloads"))), ("Likes", _count(hit.get("likes")))]
    if by.get("license"):
        rows.append(("Licence", ", ".join(by["license"])))
    if by.get("base_model"):
        rows.append(("Based on", ", ".join(b.split(":")[-1] for b in by["base_model"][:3])))
    if langs:
        rows.append(("Languages", ", ".join(langs[:8])))
    other = [t for t in plain if t not in langs][:10]
    if other:
        rows.append(("Tags", ", ".join(other)))
    if hit.get("updated"):
        rows.append(("Updated", str(hit["updated"])[:10]))
    return rows


_FRONT_MATTER = re.compile(r"\A\ufeff?---[ \t]*\r?\n.*?^(?:---|\.\.\.)[ \t]*$\r?\n?", re.S | re.M)


def card_markdown(text: str) -> str:
    """A model card's Markdown as shown: without its YAML front matter (the hub's own metadata,
    already among the facts above it)."""
    return _FRONT_MATTER.sub("", text, count=1).strip()


class CardText(QTextBrowser):
    """A model card's text: Markdown, read only. Links are shown, never followed or opened, and
    nothing is loaded for it (no images from the card's own addresses or from this computer)."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("hubCardText")
        self.setAccessibleName("Model card")
        self.setOpenLinks(False)
        self.setOpenExternalLinks(False)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.markdown: str | None = None  # what it shows, when it shows a card's Markdown

    def loadResource(self, kind, url):  # noqa: N802 (Qt's name)
        return None

    def show_markdown(self, text: str) -> None:
        """The card's Markdown, its headings sized relative to the text (not HTML's poster sizes)."""
        self.ensurePolished()
        self.markdown = text
        self.setMarkdown(text)
        size_headings(self.document())

    def setPlainText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        self.markdown = None
        super().setPlainText(text)

    def changeEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange and self.markdown is not None:
            self.show_markdown(self.markdown)  # the headings follow the new text size


def quant_order(files: list[dict]) -> list[dict]:
    def key(f: dict):
        q = (f.get("quant") or "").upper()
        return (PREFERRED_QUANTS.index(q) if q in PREFERRED_QUANTS else len(PREFERRED_QUANTS), f.get("size") or 0)
    return sorted((f for f in files if isinstance(f, dict)), key=key)


class HubBrowser(QWidget):
    search_requested = Signal(str)
    cancel_requested = Signal()  # stop waiting for the search
    repo_selected = Signal(str)
    download_requested = Signal(str)  # a reference: owner/repo:QUANT

    def __init__(self) -> None:
        super().__init__()
        self.hits: dict[str, dict] = {}
        self.repo = ""
        lay = QVBoxLayout(self)
        row = QHBoxLayout()
        self.query = QLineEdit()
        self.query.setPlaceholderText("Search Hugging Face for GGUF models: llama, qwen 7b, coder…")
        self.query.setAccessibleName("Search Hugging Face")
        self.query.setClearButtonEnabled(True)
        self.query.returnPressed.connect(self._search)
        self.search_button = QPushButton("Search")
        self.search_button.setObjectName("primaryButton")
        self.search_button.clicked.connect(self._search)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop waiting for Hugging Face")
        self.cancel_button.clicked.connect(self.cancel_requested)
        row.addWidget(self.query, 1)
        row.addWidget(self.search_button)
        row.addWidget(self.cancel_button)
        self.status = QLabel("Models on Hugging Face with GGUF files, most downloaded first.")
        self.status.setObjectName("modelDetail")
        self.status.setWordWrap(True)
        self.results = QListWidget()
        self.results.setObjectName("hubResults")
        self.results.setAccessibleName("Search results")
        # a long repository name wraps (anywhere, it has no spaces) instead of scrolling sideways
        self.results.setWordWrap(True)
        self.results.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.results.setTextElideMode(Qt.TextElideMode.ElideNone)
        self.results.setResizeMode(QListView.ResizeMode.Adjust)  # rows measured again at the new width
        self.results.currentItemChanged.connect(self._picked)
        self.card = self._card()
        split = QSplitter()
        split.setObjectName("hubSplit")
        split.setHandleWidth(10)  # a gap between the list and the card, that drags
        self.split = split
        split.addWidget(self.results)
        split.addWidget(self.card)
        split.setStretchFactor(0, 2)
        split.setStretchFactor(1, 3)
        split.setChildrenCollapsible(False)
        lay.addLayout(row)
        lay.addWidget(self.status)
        lay.addWidget(split, 1)
        self.cancel_button.hide()  # only while a search is on its way

    def _card(self) -> QFrame:
        card = QFrame()
        card.setObjectName("card")
        cl = QVBoxLayout(card)
        cl.setContentsMargins(14, 12, 14, 12)
        self.title = QLabel("Pick a model to see its card")
        self.title.setObjectName("dialogHeading")
        self.title.setWordWrap(True)
        self.title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.facts = QLabel()
        self.facts.setObjectName("modelDetail")
        self.facts.setWordWrap(True)
        self.facts.setTextFormat(Qt.TextFormat.RichText)
        qrow = QHBoxLayout()
        self.quant = QComboBox()
        self.quant.setAccessibleName("Quantization")
        self.quant.setMinimumWidth(200)
        self.download_button = QPushButton("Download")
        self.download_button.setObjectName("primaryButton")
        self.download_button.clicked.connect(self._download)
        qrow.addWidget(QLabel("Quantization"))
        qrow.addWidget(self.quant, 1)
        qrow.addWidget(self.download_button)
        self.files_note = QLabel()
        self.files_note.setObjectName("modelDetail")
        self.files_note.setWordWrap(True)
        self.card_text = CardText()
        self.card_text.hide()
        cl.addWidget(self.title)
        cl.addWidget(self.facts)
        cl.addLayout(qrow)
        cl.addWidget(self.files_note)
        cl.addWidget(self.card_text, 1)
        self.card_stretch = QWidget()
        cl.addWidget(self.card_stretch, 1)
        self._set_files(None)
        return card

    # what the page calls
    def show_searching(self, query: str) -> None:
        self.search_button.setEnabled(False)
        self.cancel_button.show()
        self.status.setText(f"Searching Hugging Face for “{query}”…" if query else "Loading the most downloaded…")

    def show_cancelled(self) -> None:
        self.search_button.setEnabled(True)
        self.cancel_button.hide()
        self.status.setText("Search cancelled.")

    def show_results(self, query: str, hits: list[dict] | None, problem: UserError | None = None) -> None:
        """The hits, or (``hits`` None) why there are none: ``problem`` in words."""
        self.search_button.setEnabled(True)
        self.cancel_button.hide()
        self.results.clear()
        self.hits = {h["repo"]: h for h in hits or []}
        if hits is None:
            self.status.setText(" ".join(p for p in (problem.detail, problem.action) if p) if problem is not None
                                else "The search did not reach Hugging Face.")
            return
        if not hits:
            self.status.setText(f"No GGUF model on Hugging Face matches “{query}”. Try a family (llama, qwen, "
                                "gemma) or an author.")
            return
        self.status.setText(f"{len(hits)} models" + (f" for “{query}”" if query else "") +
                            ", most downloaded first. Pick one for its card and files.")
        for h in hits:
            item = QListWidgetItem(f"{h['repo']}\n{_count(h.get('downloads'))} downloads · "
                                   f"{_count(h.get('likes'))} likes")
            item.setData(Qt.ItemDataRole.UserRole, h["repo"])
            item.setToolTip(h["repo"])
            self.results.addItem(item)

    def show_files(self, repo: str, body: dict | None) -> None:
        if repo != self.repo:
            return  # another model was picked meanwhile
        self._set_files(None if body is None else quant_order(body.get("files") or []))

    def show_card(self, repo: str, text: str | None) -> None:
        """The repository's card text ("" when it has none, None when it could not be read)."""
        if repo != self.repo:
            return
        body = card_markdown(text or "")
        if body:
            self.card_text.show_markdown(body)
        else:
            self.card_text.setPlainText("This repository has no model card." if text is not None
                                        else "Its model card could not be read.")
        self.card_text.verticalScrollBar().setValue(0)

    # inside
    def _search(self) -> None:
        self.search_requested.emit(self.query.text().strip())

    def _picked(self, item: QListWidgetItem | None, _prev=None) -> None:
        if item is None:
            return
        self.repo = item.data(Qt.ItemDataRole.UserRole)
        hit = self.hits.get(self.repo, {})
        self.title.setText(self.repo)
        self.facts.setText("".join(f"<div><b>{html.escape(k)}</b>&nbsp; {html.escape(v)}</div>"
                                   for k, v in card_facts(hit)))
        self.quant.clear()
        self.download_button.setEnabled(False)
        self.files_note.setText("Listing its files…")
        self.card_text.setPlainText("Reading its model card…")
        self.card_text.show()
        self.card_stretch.hide()
        self.repo_selected.emit(self.repo)

    def _set_files(self, files: list[dict] | None) -> None:
        self.quant.clear()
        for f in files or []:
            size = format_size(f.get("size")) or "size unknown"
            parts = f" · {f['parts']} parts" if (f.get("parts") or 1) > 1 else ""
            label = f.get("quant") or f.get("file")
            if f.get("convert"):
                label, parts = f"{f.get('file')} (converted to GGUF)", ""
            self.quant.addItem(f"{label} · {size}{parts}", f.get("quant") or "")
        self.download_button.setEnabled(bool(files))
        convert = next((f["convert"] for f in files or [] if f.get("convert")), None)
        if convert:
            self.files_note.setText(f"A {convert.upper()} checkpoint, not a GGUF: Hearth converts it to a GGUF when the "
                                    "download ends, its 4-bit weights kept as they are.")
        elif files is None:
            self.files_note.setText("" if not self.repo else "Its files could not be listed.")
        elif not files:
            self.files_note.setText("This repository has no GGUF model file Hearth can run.")
        else:
            self.files_note.setText(f"{len(files)} quantizations. Smaller ones need less memory and answer "
                                    "faster; larger ones answer better. Q4_K_M is a good balance.")

    def _download(self) -> None:
        quant = self.quant.currentData()
        if self.repo:
            self.download_requested.emit(f"{self.repo}:{quant}" if quant else self.repo)
