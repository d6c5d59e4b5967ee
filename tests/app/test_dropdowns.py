"""Drop-down lists (the model picker, the presets, the theme) open below their box with up to ten
rows of a comfortable height, as wide as their longest entry (real widgets offscreen)."""

from __future__ import annotations

from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QComboBox

from runtime.server.launcher import free_port


def _open(combo: QComboBox, driver) -> tuple[int, int, bool, bool]:
    """(rows wholly in sight, the smallest row height, the list starts at the box's bottom edge,
    its longest entry fits) while the list is open."""
    combo.showPopup()
    driver.pump(0.1)
    view = combo.view()
    port = view.viewport().rect()
    rects = [view.visualRect(combo.model().index(i, 0)) for i in range(combo.count())]
    whole = sum(1 for r in rects if port.contains(r))
    least = min(r.height() for r in rects)
    popup_top = view.window().mapToGlobal(QPoint(0, 0)).y()
    below = abs(popup_top - combo.mapToGlobal(QPoint(0, combo.height())).y()) <= 4
    fits = view.viewport().width() >= max(view.sizeHintForIndex(combo.model().index(i, 0)).width()
                                          for i in range(combo.count()))
    combo.hidePopup()
    driver.pump(0.05)
    return whole, least, below, fits


def test_dropdowns_show_ten_rows_below_their_box(make_app, driver):
    h = make_app(free_port())
    h.window.resize(1000, 700)
    h.window.show()
    ids = ["smollm2-135m", "qwen2.5-coder-7b-instruct"] + [f"model-{i}" for i in range(12)]
    h.chat_page.set_models(ids, ids[0])
    h.chat_page.header.set_available(
        [{"id": ids[1], "loaded": True, "memory": {"rss_bytes": 5 * 10**9}, "capabilities": ["chat", "tools"]}]
        + [{"id": i, "capabilities": ["chat"]} for i in ids if i != ids[1]])
    driver.pump(0.2)
    picker = h.chat_page.header.model_picker
    assert picker.count() == 15
    whole, least, below, fits = _open(picker, driver)
    assert whole == 10 and least >= 24 and below and fits, (whole, least, below, fits)
    picker.setCurrentIndex(12)  # a choice far down opens the same list, not one shifted over the box
    assert _open(picker, driver)[:3] == (10, least, True)

    from app.ui.chat_settings import ConversationSettingsDialog

    d = ConversationSettingsDialog(h.chat.new_conversation(), h.window, h.presets)
    d.show()
    driver.pump(0.1)
    n = d.preset_picker.count()
    assert n >= 6
    whole, least, below, _ = _open(d.preset_picker, driver)
    assert whole == n and least >= 24 and below
    d.close()
    h.window.show_page("Settings")
    driver.pump(0.1)
    whole, least, below, _ = _open(h.settings_page.theme, driver)
    assert whole == 3 and least >= 24 and below
