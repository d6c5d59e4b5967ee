"""One message of a conversation as a widget: role, reasoning, tool calls, the answer's blocks,
citations, the numbers under it, and its actions (copy, edit and resend, regenerate, and the
switch between its versions when regenerating or editing kept older ones).

A message builds only the parts it has: the reasoning toggle, the tool-call blocks, the sources,
the error line and the editor come into being the first time they are needed (or asked for).
Each widget costs style-sheet work when it is made, and a screen of messages must appear within
a frame or two (``MessageView`` builds them as they scroll in).
"""

from __future__ import annotations

import html

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget

from app.conversations import Message, MessageMeta
from app.ui.blocks import MessageBody, ToolCallsView, chevron, clear_layout, small_button as _small, theme_colours

#: the finish reasons worth a word under an answer
#: how long Copy says "Copied"
COPIED_MS = 1500
FINISH_WORDS = {"stopped": "stopped", "length": "cut at the token limit",
                "interrupted": "interrupted: the model stopped before the answer was complete"}


def stats_line(meta: MessageMeta) -> str:
    """The numbers under an answer: model · tokens/s (and its share of the memory wall, the
    ``decode_limit_tps`` the service reported for the model when the answer was made) · TTFT ·
    cached prompt tokens · acceptance."""
    parts = []
    if meta.get("model"):
        parts.append(meta["model"])
    if meta.get("tokens_per_s") is not None:
        speed = f"{meta['tokens_per_s']:.1f} tok/s"
        limit = meta.get("decode_limit_tps")
        if isinstance(limit, (int, float)) and limit > 0:
            speed += f", {meta['tokens_per_s'] / limit:.0%} of this machine's limit"
        parts.append(speed)
    if meta.get("completion_tokens") is not None:
        parts.append(f"{meta['completion_tokens']} tokens")
    if meta.get("ttft_s") is not None:
        parts.append(f"first token {meta['ttft_s'] * 1000:.0f} ms")
    if meta.get("cached_tokens") is not None and meta.get("prompt_tokens") is not None:
        parts.append(f"{meta['cached_tokens']}/{meta['prompt_tokens']} prompt tokens cached")
    if meta.get("acceptance_rate") is not None:
        parts.append(f"draft acceptance {meta['acceptance_rate'] * 100:.0f}%")
    finish = FINISH_WORDS.get(meta.get("finish") or "")
    if finish:
        parts.append(finish)
    return " · ".join(parts)


class MediaStrip(QWidget):
    """The images of a message as thumbnails (and its sound clips by name), in a wrapping row."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("mediaStrip")
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(0, 0, 0, 0)
        self._row.setSpacing(6)
        self._key: tuple = ()

    def set_media(self, media: list[dict]) -> None:
        from app.ui.thumbnails import thumbnail

        key = tuple((a.get("name"), len(a.get("data") or "")) for a in media)
        if key == self._key:
            return
        self._key = key
        clear_layout(self._row)
        for a in media:
            label = QLabel()
            label.setObjectName("thumbnail")
            pix = thumbnail(a.get("data") or "") if a.get("kind") == "image" else None
            if pix is not None:
                label.setPixmap(pix)
                label.setFixedSize(pix.size())
            else:
                label.setText(("Sound clip: " if a.get("kind") == "audio" else "") + str(a.get("name", "")))
            label.setToolTip(str(a.get("name", "")))
            label.setAccessibleName(f"{'Image' if a.get('kind') == 'image' else 'Sound clip'} {a.get('name', '')}")
            self._row.addWidget(label)
        self._row.addStretch(1)


def _wrapping(name: str, rich: bool = False) -> QLabel:
    label = QLabel()
    label.setObjectName(name)
    label.setWordWrap(True)
    if rich:
        label.setTextFormat(Qt.TextFormat.RichText)
    return label


class MessageWidget(QFrame):
    copy_requested = Signal(int)
    edit_submitted = Signal(int, str)
    edit_started = Signal(int)  # message id: its editor is open (the view brings it into sight)
    regenerate_requested = Signal()
    citation_clicked = Signal(dict)
    variant_requested = Signal(int, int)  # message id, -1 (the older version) or +1 (the newer)

    def __init__(self, message: Message, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.message = message
        self._busy = False
        self._copied_timer: QTimer | None = None
        assistant = message.role == "assistant"
        self.setObjectName("assistantMessage" if assistant else "userMessage")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.lay = QVBoxLayout(self)
        self.lay.setContentsMargins(14, 10, 14, 8)
        self.lay.setSpacing(4)
        self.role = QLabel("Assistant" if assistant else "You")
        self.role.setObjectName("roleLabel")
        self.body = MessageBody()
        self.stats = _wrapping("statsLabel")
        self.stats.hide()
        self.buttons = QHBoxLayout()
        self.buttons.setSpacing(6)
        self.copy_button = _small("Copy")
        self.copy_button.setToolTip("Copy this message")
        self.copy_button.clicked.connect(self._copy)
        self.buttons.addWidget(self.copy_button)
        self.buttons.addStretch(1)
        self.lay.addWidget(self.role)
        self.lay.addWidget(self.body)
        self.lay.addWidget(self.stats)
        self.lay.addLayout(self.buttons)
        self._parts: dict[str, QWidget] = {}
        if assistant:
            self.regen_button  # noqa: B018 - made now: the last answer shows it
        else:
            self.edit_button.show()
        self.refresh()

    # the parts made on demand, in their place in the column
    _ORDER = ("media", "attachments", "reasoning_toggle", "reasoning", "tool_calls", "body", "citations", "editor", "error",
              "stats")

    def _part(self, name: str) -> QWidget | None:
        return self._parts.get(name)

    def _make(self, name: str) -> QWidget:
        w = self._parts.get(name)
        if w is not None:
            return w
        w = self._new_part(name)
        w.hide()
        self._parts[name] = w
        later = [n for n in self._ORDER[self._ORDER.index(name) + 1:] if n in ("body", "stats") or n in self._parts]
        following = self.body if later[0] == "body" else self.stats if later[0] == "stats" else self._parts[later[0]]
        at = self.lay.indexOf(following)
        if name == "reasoning_toggle":
            self.lay.insertWidget(at, w, 0, Qt.AlignmentFlag.AlignLeft)
        else:
            self.lay.insertWidget(at, w)
        return w

    def _new_part(self, name: str) -> QWidget:
        if name == "reasoning_toggle":
            toggle = _small("Show reasoning")
            toggle.setIcon(chevron(False))
            toggle.setObjectName("blockToggle")
            toggle.setCheckable(True)
            toggle.toggled.connect(self._toggle_reasoning)
            return toggle
        if name == "reasoning":
            return _wrapping("reasoningBody")
        if name == "tool_calls":
            return ToolCallsView()
        if name == "attachments":
            return _wrapping("citations")
        if name == "media":
            return MediaStrip()
        if name == "citations":
            citations = _wrapping("citations", rich=True)
            citations.linkActivated.connect(self._citation)
            return citations
        if name == "editor":
            editor = QPlainTextEdit()
            editor.setMaximumHeight(140)
            editor.setTabChangesFocus(True)
            return editor
        if name == "error":
            return _wrapping("errorLabel")
        raise ValueError(f"no part named {name!r}")

    def _button(self, name: str, text: str, slot) -> QPushButton:
        b = self._parts.get(name)
        if isinstance(b, QPushButton):
            return b
        b = _small(text)
        b.clicked.connect(slot)
        b.hide()
        self._parts[name] = b
        self.buttons.insertWidget(self.buttons.count() - 1, b)
        return b

    reasoning_toggle = property(lambda self: self._make("reasoning_toggle"))
    reasoning = property(lambda self: self._make("reasoning"))
    tool_calls = property(lambda self: self._make("tool_calls"))
    citations = property(lambda self: self._make("citations"))
    attachments = property(lambda self: self._make("attachments"))
    media = property(lambda self: self._make("media"))
    editor = property(lambda self: self._make("editor"))
    error = property(lambda self: self._make("error"))
    edit_button = property(lambda self: self._button("edit_button", "Edit", self._start_edit))
    save_button = property(lambda self: self._button("save_button", "Save && resend", self._save_edit))
    cancel_button = property(lambda self: self._button("cancel_button", "Cancel", self._cancel_edit))
    regen_button = property(lambda self: self._button("regen_button", "Regenerate", self.regenerate_requested))

    @property
    def variant_switch(self) -> "VariantSwitch":
        """‹ 2 / 3 ›: the versions of this message (made when it has more than one)."""
        w = self._parts.get("variant_switch")
        if isinstance(w, VariantSwitch):
            return w
        switch = VariantSwitch()
        switch.step.connect(lambda step: self.variant_requested.emit(self.message.id, step))
        self._parts["variant_switch"] = switch
        self.buttons.insertWidget(0, switch)
        return switch

    def refresh(self) -> None:
        m = self.message
        streaming = m.meta.get("finish") == "streaming"
        text = m.content if m.content or not streaming else "…"
        calls = m.meta.get("tool_calls") or []
        self.body.set_markdown(text, plain=m.role != "assistant")
        _show(self.body, bool(m.content) or not calls)
        stats = stats_line(m.meta) if m.role == "assistant" and not streaming else ""
        if stats != self.stats.text():
            self.stats.setText(stats)
        _show(self.stats, bool(stats))
        finish = m.meta.get("finish") or ""
        if self.property("finish") != finish:  # an interrupted answer is marked (style sheet)
            self.setProperty("finish", finish)
            self.style().unpolish(self)
            self.style().polish(self)
        reasoning = m.meta.get("reasoning") or ""
        if reasoning or "reasoning" in self._parts:
            self.reasoning.setText(_plain_html(reasoning))
            _show(self.reasoning_toggle, bool(reasoning))
            _show(self.reasoning, bool(reasoning) and self.reasoning_toggle.isChecked())
        if calls or "tool_calls" in self._parts:
            self.tool_calls.set_calls(calls)
            _show(self.tool_calls, bool(calls))
        attached = m.meta.get("attachments") or ()
        shown = [a for a in attached if isinstance(a, dict) and a.get("kind") in ("image", "audio")]
        if shown or "media" in self._parts:
            self.media.set_media(shown)
            _show(self.media, bool(shown))
        files = [a.get("name", "") for a in attached if isinstance(a, dict) and a.get("kind") not in ("image", "audio")]
        if files or "attachments" in self._parts:
            self.attachments.setText("Attached: " + " · ".join(files))
            _show(self.attachments, bool(files))
        cites = m.meta.get("citations") or []
        if cites or "citations" in self._parts:
            self.citations.setText("<div style='margin-bottom:2px'><b>Sources</b></div>" + "".join(
                f"<div style='margin:3px 0'><a href='cite:{i}'>[{i + 1}] {html.escape(c.get('title', ''))}"
                f"{', page ' + str(c['page']) if c.get('page') else ''}</a>"
                f"&nbsp; <span>“{html.escape(_snippet(c.get('text', '')))}”</span></div>"
                for i, c in enumerate(cites)))
            _show(self.citations, bool(cites))
        error = m.meta.get("error", "")
        if error or "error" in self._parts:
            self.error.setText(error)
            _show(self.error, bool(error))
        self.copy_button.setEnabled(bool(m.content))
        if m.variants > 1 or "variant_switch" in self._parts:
            self.variant_switch.set_place(m.variant, m.variants, self._busy)
            _show(self.variant_switch, m.variants > 1)

    def _citation(self, link: str) -> None:
        cites = self.message.meta.get("citations") or []
        i = int(link.split(":", 1)[1])
        if 0 <= i < len(cites):
            self.citation_clicked.emit(cites[i])

    def _toggle_reasoning(self, shown: bool) -> None:
        self.reasoning_toggle.setText("Hide reasoning" if shown else "Show reasoning")
        self.reasoning_toggle.setIcon(chevron(shown))
        self.reasoning.setVisible(shown and bool(self.message.meta.get("reasoning")))

    def set_last_answer(self, last: bool, busy: bool) -> None:
        self._busy = busy
        if "variant_switch" in self._parts:
            self.variant_switch.set_place(self.message.variant, self.message.variants, busy)
        if self.message.role == "assistant":
            _show(self.regen_button, last and not busy)
        else:
            self.edit_button.setEnabled(not busy)

    def editing(self) -> bool:
        """The user is editing this message (the view keeps its widget)."""
        return "editor" in self._parts and not self._parts["editor"].isHidden()

    def _copy(self) -> None:
        QGuiApplication.clipboard().setText(self.message.content)
        self.show_copied()
        self.copy_requested.emit(self.message.id)

    def show_copied(self) -> None:
        """"Copied" on the Copy button for a moment: the click (or Ctrl+Shift+C) did something."""
        self.copy_button.setText("Copied")
        if self._copied_timer is None:
            self._copied_timer = QTimer(self)  # goes with the widget: no late call on a deleted one
            self._copied_timer.setSingleShot(True)
            self._copied_timer.timeout.connect(lambda: self.copy_button.setText("Copy"))
        self._copied_timer.start(COPIED_MS)

    def _start_edit(self) -> None:
        self.editor.setPlainText(self.message.content)
        for w, on in ((self.editor, True), (self.body, False), (self.save_button, True),
                      (self.cancel_button, True), (self.edit_button, False), (self.copy_button, False)):
            w.setVisible(on)
        self.editor.setFocus()
        self.edit_started.emit(self.message.id)

    def _cancel_edit(self) -> None:
        for w, on in ((self.editor, False), (self.body, True), (self.save_button, False),
                      (self.cancel_button, False), (self.edit_button, True), (self.copy_button, True)):
            w.setVisible(on)

    def _save_edit(self) -> None:
        text = self.editor.toPlainText()
        self._cancel_edit()
        self.edit_submitted.emit(self.message.id, text)


class VariantSwitch(QWidget):
    """The versions of a message: older, "2 / 3", newer. A regenerated answer or an edited
    question keeps the earlier ones; flipping shows each with the conversation that followed it."""

    step = Signal(int)

    def __init__(self) -> None:
        super().__init__()
        from app.ui.icons import icon
        self.setObjectName("variantSwitch")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(0)
        colour = theme_colours().muted
        self.older, self.newer = _small(""), _small("")
        for b, name, tip, step in ((self.older, "chevron-left", "Older version", -1),
                                   (self.newer, "chevron-right", "Newer version", 1)):
            b.setIcon(icon(name, colour, 14))
            b.setToolTip(tip)
            b.setAccessibleName(tip)
            b.setFixedWidth(26)
            b.clicked.connect(lambda _=False, s=step: self.step.emit(s))
        self.label = QLabel()
        self.label.setObjectName("variantLabel")
        lay.addWidget(self.older)
        lay.addWidget(self.label)
        lay.addWidget(self.newer)

    def set_place(self, variant: int, variants: int, busy: bool = False) -> None:
        text = f"{variant} / {variants}"
        if self.label.text() != text:
            self.label.setText(text)
            self.label.setAccessibleName(f"Version {variant} of {variants}")
        self.older.setEnabled(variant > 1 and not busy)
        self.newer.setEnabled(variant < variants and not busy)


def _show(w: QWidget, on: bool) -> None:
    """Show or hide, without the work (and the layout request) when nothing changes."""
    if w.isHidden() == on:
        w.setVisible(on)


def _snippet(text: str, n: int = 110) -> str:
    line = " ".join(w for w in text.split() if not w.strip("#") == "")
    cut = line.find(". ", 0, 60)  # a passage cut mid-sentence: start at the next sentence
    if 0 <= cut and line[:1].islower():
        line = line[cut + 2:]
    return line if len(line) <= n else line[:n - 1].rstrip() + "…"


def _plain_html(text: str) -> str:
    return "<p style='white-space: pre-wrap'>" + html.escape(text) + "</p>"
