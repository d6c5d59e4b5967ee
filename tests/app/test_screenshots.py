"""Every page in the light and the dark theme: drawn offscreen here (not blank, and the dark
theme really dark), and the README's screenshots (``make screenshots``) present for each."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtGui import QColor, QImage

from runtime.server.launcher import free_port

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "docs" / "screenshots"
PAGES = ("chat-tools", "tool-approval", "chat-document", "chat-code", "chat-math", "chat-search", "chat-versions",
         "chat-indexing", "chat-settings", "first-run", "models", "model-settings", "hugging-face", "server", "settings",
         "mcp-servers", "narrow")


def _colours(img: QImage, step: int = 16) -> set[int]:
    return {img.pixel(x, y) for x in range(0, img.width(), step) for y in range(0, img.height(), step)}


def _lightness(img: QImage, x: int, y: int) -> int:
    return QColor(img.pixel(x, y)).lightness()


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("theme", ("light", "dark"))
def test_the_screenshot_exists_and_is_not_blank(page, theme):
    path = SHOTS / f"{page}-{theme}.png"
    assert path.exists(), f"{path.name} is missing: run make screenshots"
    img = QImage(str(path))
    assert (img.width(), img.height()) == (800, 600) if page == "narrow" else img.width() >= 1000 and img.height() >= 600
    assert len(_colours(img)) > 20, f"{path.name} is nearly one colour"  # a sparse page has ~30 on this grid
    # the page's background (right of the navigation rail, below the header) follows the theme
    bg = _lightness(img, img.width() - 40, img.height() // 2)
    assert (bg > 160) if theme == "light" else (bg < 90), f"{path.name}: background lightness {bg}"


def test_every_page_draws_in_both_themes(make_app, driver):
    h = make_app(free_port())  # no service: the pages and their empty states
    h.window.resize(1200, 760)
    h.window.show()
    for dark in (False, True):
        h.apply_theme(dark=dark)
        for name in ("Chat", "Models", "Server", "Settings"):
            h.window.show_page(name)
            driver.pump(0.05)
            img = h.window.grab().toImage()
            assert len(_colours(img)) > 8, f"{name} drew nearly nothing"
            bg = _lightness(img, img.width() - 30, img.height() // 2)
            assert (bg < 90) if dark else (bg > 160), f"{name} in the {'dark' if dark else 'light'} theme: {bg}"
    assert h.chat_page.view.empty.isVisibleTo(h.chat_page.view)
    assert "Ctrl+N" in h.chat_page.view.empty.text()
