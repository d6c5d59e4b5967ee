"""The window at 800x600 (real widgets, offscreen): it can be made that small, the navigation
rail folds to icons, the chat header keeps its title and its controls do not overlap, and no
page asks for more width than the window has."""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from runtime.server.launcher import free_port


def _overlaps(widgets: list[QWidget]) -> list[tuple[str, str]]:
    out = []
    for i, a in enumerate(widgets):
        for b in widgets[i + 1:]:
            if a.geometry().intersects(b.geometry()):
                out.append((a.objectName() or type(a).__name__, b.objectName() or type(b).__name__))
    return out


def test_the_window_fits_800_by_600(make_app, driver):
    h = make_app(free_port())
    w = h.window
    w.show()
    w.resize(800, 600)
    driver.pump(0.2)
    assert (w.width(), w.height()) == (800, 600), f"the window stays {w.width()}x{w.height()}"
    assert w.compact and w.rail.width() < 100
    chat = h.chat_page
    c = h.chat.new_conversation()
    h.chat.rename(c.id, "A conversation with a rather long title about decorators in Python")
    chat.set_models(["smollm2-135m", "gemma-3-270m"], "smollm2-135m")
    chat.header.set_available([{"id": "smollm2-135m", "loaded": True, "capabilities": ["chat", "tools"]}])
    chat.header.set_fit("Runs on CPU · ~15 tok/s", "#1565c0", "verdict")
    driver.pump(0.2)
    header = chat.header
    shown = [x for x in (header.title, header.model_picker, header.badges, header.ctx_spin, header.fit_label,
                         header.settings_button) if x.isVisible()]
    assert header.title in shown and header.title.width() >= 100, "the title disappeared"
    assert header.model_picker in shown and header.settings_button in shown
    assert not _overlaps(shown), f"header controls overlap: {_overlaps(shown)}"
    assert all(x.geometry().right() <= header.width() for x in shown), "a header control is cut off"
    for name, page in w.pages.items():
        w.show_page(name)
        driver.pump(0.05)
        assert page.minimumSizeHint().width() <= w.stack.width(), f"{name} asks for more than 800 px"
    w.show_page("Chat")
    w.resize(1180, 760)
    driver.pump(0.2)
    assert not w.compact and (header.fit_label.isVisible() or header.badges.isVisible()), "no room comes back"
