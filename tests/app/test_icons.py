"""Icons are drawn, never emoji (an emoji shows as an empty box where no emoji font is
installed): no text in the window uses one, and the tool-call and reasoning blocks carry drawn
icons that follow the theme."""

from __future__ import annotations

import re

from PySide6.QtWidgets import QAbstractButton, QLabel, QLineEdit, QPlainTextEdit, QWidget

from app.conversations import Message
from app.ui.message_widget import MessageWidget
from runtime.server.launcher import free_port

#: pictographs and the symbol blocks fonts without emoji leave empty (⏱ ⚙ 📄 🔥 ...)
EMOJI = re.compile("[\U0001F000-\U0001FFFF\u2300-\u23FF\u2600-\u26FF\u2700-\u27BF\uFE0F]")


def _texts(root: QWidget) -> list[str]:
    out = [root.windowTitle()]
    for w in root.findChildren(QWidget):
        for getter in ("text", "toolTip", "placeholderText"):
            if isinstance(w, (QLabel, QAbstractButton, QLineEdit, QPlainTextEdit)) or getter == "toolTip":
                value = getattr(w, getter, None)
                if callable(value):
                    out.append(value())
    return [t for t in out if isinstance(t, str)]


def test_no_emoji_anywhere_in_the_window(make_app, driver):
    h = make_app(free_port())
    h.window.show()
    c = h.chat.new_conversation()
    calls = [{"name": "get_weather", "arguments": "{}", "status": s} for s in ("done", "failed", "timeout", "pending")]
    h.chat.store.add_message(c.id, "assistant", "Sunny.", {"tool_calls": calls, "reasoning": "Look it up."})
    h.chat.select(c.id)
    driver.pump(0.2)
    for name in ("Chat", "Models", "Server", "Settings"):
        h.window.show_page(name)
        driver.pump(0.02)
    found = [t for t in _texts(h.window) if EMOJI.search(t)]
    assert not found, f"emoji in the window: {found[:5]}"


def test_blocks_carry_drawn_icons_in_the_theme(make_app, driver):
    h = make_app(free_port())
    call = {"name": "get_weather", "arguments": "{}", "status": "failed"}
    images = []
    for dark in (False, True):
        h.apply_theme(dark=dark)
        w = MessageWidget(Message(1, "assistant", "x", {"tool_calls": [call], "reasoning": "r"}))
        block = w.tool_calls.blocks[0]
        assert not block.toggle.icon().isNull() and not w.reasoning_toggle.icon().isNull()
        assert not EMOJI.search(block.toggle.text() + w.reasoning_toggle.text())
        images.append(block.toggle.icon().pixmap(16, 16).toImage())
    assert images[0] != images[1], "the icon does not follow the theme"
