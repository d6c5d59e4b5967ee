"""A theme switch restyles the window a part per turn of the event loop (no part of more than a
few dozen widgets but those that cannot be cut), the visible page first; a hidden page has the
new sheet once shown, and a dialog opened afterwards has it too (real window offscreen)."""

from __future__ import annotations

from PySide6.QtWidgets import QDialog, QLabel, QVBoxLayout, QWidget

from app.ui.style import DARK, stylesheet
from app.ui.theme_apply import PART_WIDGETS, split_parts
from runtime.server.launcher import free_port


def test_theme_switch_is_spread_over_turns(make_app, driver):
    h = make_app(free_port())
    h.window.resize(1000, 700)
    h.window.show()
    driver.pump(0.3)
    assert h.qapp.styleSheet() == ""  # never the whole application in one pass
    h.apply_theme(dark=True)
    assert h.theme_applier.pending() > 5  # the work is left for the next turns
    sheet = stylesheet(DARK)
    parts = [x for _, w in h._theme_parts() for x in split_parts(w, sheet)]
    big = [x for x in parts if len(x.findChildren(QWidget)) >= PART_WIDGETS]
    assert len(big) <= 2, [type(x).__name__ for x in big]  # the settings form's group, at most
    h.window.show_page("Models")  # a page shown before its turn comes is styled at once
    assert h.models_page.tabs.tabBar().styleSheet() == sheet or h.models_page.styleSheet() == sheet \
        or all(p.styleSheet() == sheet for p in split_parts(h.models_page, sheet))
    driver.until(lambda: h.theme_applier.pending() == 0, 10, "the switch to finish")
    assert all(p.styleSheet() == sheet for p in parts)
    d = QDialog(None)
    QVBoxLayout(d).addWidget(QLabel("x"))
    d.show()
    assert d.styleSheet() == sheet
    d.close()


def _fill(w: QWidget) -> str:
    """The colour a widget paints inside its border (its middle, left of any text)."""
    img = w.grab().toImage()
    return img.pixelColor(4, img.height() // 2).name()


def test_installed_rows_follow_a_live_switch(make_app, driver):
    """The Installed pane's rows and their buttons ("Make smaller" among them) take the new
    theme's colours, with no button left in the old one."""
    from PySide6.QtWidgets import QPushButton

    from app.api_types import LocalModel
    from app.ui.style import LIGHT

    h = make_app(free_port())
    h.models.local.reset([LocalModel("m", "A model", "hub", "/models/m.gguf", 10**9, "Q4_1", capabilities=["chat"])])
    h.window.resize(1000, 700)
    h.window.show()
    h.window.show_page("Models")
    driver.pump(0.3)
    row = h.models_page.local_list.rows[0]
    buttons = [b for b in row.findChildren(QPushButton) if b.isVisible()]
    assert row.shrink_button in buttons
    assert {_fill(b) for b in buttons} == {LIGHT.surface}
    h.apply_theme(dark=True)
    driver.until(lambda: h.theme_applier.pending() == 0, 10, "the switch to finish")
    driver.pump(0.1)
    assert _fill(row) == DARK.surface
    assert {b.text(): _fill(b) for b in buttons} == {b.text(): DARK.surface for b in buttons}
    assert _fill(h.models_page.local_list.viewport()) == DARK.window
    # the containers around the rows (the tabs' pane, styled by no sheet of their own) too
    tabs = h.models_page.tabs
    assert _fill(tabs) == DARK.window and tabs.palette().window().color().name() == DARK.window


def test_a_spin_box_text_is_inset_like_a_line_edit(make_app, driver):
    """The sheet's padding reaches a line edit's text but not a spin box's: its text starts inside
    the frame all the same (the chat's context box, the settings' numbers)."""
    from PySide6.QtWidgets import QAbstractSpinBox

    h = make_app(free_port())
    h.window.show()
    for page in ("Chat", "Settings"):
        h.window.show_page(page)
        driver.pump(0.1)
    boxes = [b for b in h.window.findChildren(QAbstractSpinBox) if b.isVisible()]
    assert boxes and all(b.lineEdit().textMargins().left() >= 5 for b in boxes), \
        [(b.objectName(), b.lineEdit().textMargins().left()) for b in boxes]
