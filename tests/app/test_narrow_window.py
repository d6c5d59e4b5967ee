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


def _pages_and_tabs(w):
    """Each page, and each tab of a page that has tabs, shown in turn: (its name, the page)."""
    from PySide6.QtWidgets import QTabWidget

    for name, page in w.pages.items():
        w.show_page(name)
        tabs = [t for t in page.findChildren(QTabWidget) if t.isVisible()]
        if not tabs:
            yield name, page
        for t in tabs:
            for i in range(t.count()):
                t.setCurrentIndex(i)
                yield f"{name} / {t.tabText(i)}", page


def _misfits(page: QWidget) -> list[str]:
    """What does not fit the page as shown: a button outside its visible rect or squashed below
    its own minimum, a box against (or past) its right edge, a list that scrolls sideways."""
    from PySide6.QtCore import QPoint, QRect
    from PySide6.QtWidgets import QAbstractButton, QAbstractScrollArea, QGroupBox

    shown = page.visibleRegion().boundingRect()
    out = []
    for b in page.findChildren(QAbstractButton):
        if not b.isVisible() or b.window() is not page.window():
            continue
        r = QRect(b.mapTo(page, QPoint(0, 0)), b.size())
        least = b.minimumSizeHint()
        if not shown.contains(r) or r.height() < least.height() or r.width() < least.width():
            out.append(f"button {b.text() or b.toolTip()!r} at {r.getRect()}, needs {least.toTuple()}")
    for g in page.findChildren(QGroupBox):
        r = QRect(g.mapTo(page, QPoint(0, 0)), g.size())
        if g.isVisible() and r.right() > shown.right() - 4:
            out.append(f"box {g.title()!r} reaches the edge: {r.getRect()}")
    for s in page.findChildren(QAbstractScrollArea):
        if s.isVisible() and s.horizontalScrollBar().isVisible():
            out.append(f"{s.objectName() or type(s).__name__} scrolls sideways")
    return out


def test_every_page_and_tab_fits_800_by_600(make_app, driver):
    """Buttons whole and in sight, boxes clear of the right edge, nothing scrolling sideways: on
    every page and tab, with the Settings lists empty and then holding long entries."""
    from app.mcp_servers import ServerConfig

    h = make_app(free_port())
    w = h.window
    w.show()
    w.resize(800, 600)
    driver.pump(0.2)

    def check() -> None:
        for name, page in _pages_and_tabs(w):
            driver.pump(0.05)
            assert not _misfits(page), f"{name} at 800x600: {_misfits(page)}"

    check()
    h.mcp.servers.append(ServerConfig("files-in-my-notes", command="npx", args=[
        "-y", "@modelcontextprotocol/server-filesystem", "/home/someone/Documents/notes/projects/2025/drafts"]))
    h.mcp.servers.append(ServerConfig("search", transport="http", url="http://127.0.0.1:8000/mcp/search/v2"))
    h.mcp_panel.refresh()
    h.remotes.state = {"models": [], "upstreams": [{
        "name": "gpu-box-in-the-basement", "url": "http://192.168.1.20:8000/v1", "models": [],
        "health": {"state": "down", "last_error": "Cannot connect to host 192.168.1.20:8000 [Connection refused]"}}]}
    h.remotes.changed.emit(h.remotes.state)
    check()


def test_the_first_run_card_stays_small_at_800_by_600(make_app, driver):
    """The suggestion takes two lines above the conversation, never the composer's room, and
    an answer being edited stays in sight; Not now puts it away."""
    h = make_app(free_port())
    w = h.window
    w.show()
    w.resize(800, 600)
    card = h.chat_page.suggestion_card
    card.offer("Qwen2.5 3B Instruct", "Qwen/Qwen2.5-3B-Instruct-GGUF · Q4_K_M · 2.0 GB · apache-2.0",
               "The largest model that runs on the processor of this computer at about 14 tokens per second.")
    card.show()
    c = h.chat.new_conversation()
    for i in range(3):
        h.chat.messages.append(h.chat.store.add_message(c.id, "user", f"Question {i} " * 10))
        h.chat.messages.append(h.chat.store.add_message(c.id, "assistant", f"Answer {i} " * 40, {"finish": "stop"}))
    driver.pump(0.3)
    view, composer = h.chat_page.view, h.chat_page.input
    assert card.height() <= 64 and card.height() * 5 <= view.height(), (card.height(), view.height())
    assert composer.visibleRegion().boundingRect() == composer.rect()  # the composer whole
    assert not card.geometry().intersects(view.geometry())
    assert card.later_button.isVisible() and card.download_button.isVisible()
    assert "14 tokens per second" in card.reason.toolTip()  # what is cut short is in the tooltip

    question = view.widget_at(4)
    question.edit_button.click()
    driver.pump(0.3)
    port = view.viewport()
    for part in (question.editor, question.save_button):
        top_left = part.mapTo(port, part.rect().topLeft())
        assert port.rect().contains(top_left) and part.isVisible(), "the edit box is out of sight"
    question.cancel_button.click()
    card.later_button.click()
    driver.pump(0.1)
    assert not card.isVisible() and h.settings.suggestion_done


def test_the_chat_list_folds_in_a_narrow_window_and_its_button_brings_it_back(make_app, driver):
    """At 800x600 the conversation takes the width and the header's list button brings the chat
    list back (a choice kept over resizes); folded, the list is out of the Tab order; a wide
    window shows it from the start."""
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    h = make_app(free_port())
    h.window.resize(800, 600)
    h.window.show()
    h.window.show_page("Chat")
    driver.pump(0.3)
    page = h.chat_page
    button = page.header.list_button
    assert not page.sidebar.isVisible() and not button.isChecked() and button.isVisible()
    assert page.view.width() > 600
    button.click()
    driver.pump(0.2)
    assert page.sidebar.isVisible() and button.isChecked() and page.split.sizes()[0] > 0
    h.window.resize(820, 620)
    driver.pump(0.2)
    assert page.sidebar.isVisible()  # the user's choice stays
    QTest.keyClick(page, Qt.Key.Key_B, Qt.KeyboardModifier.ControlModifier)  # the same from the keyboard
    driver.pump(0.2)
    assert not page.sidebar.isVisible() and not button.isChecked()
    h.window.resize(1280, 800)
    driver.pump(0.2)
    assert not page.sidebar.isVisible()
    wide = make_app(free_port())
    wide.window.resize(1280, 800)
    wide.window.show()
    driver.pump(0.3)
    assert wide.chat_page.sidebar.isVisible() and wide.chat_page.header.list_button.isChecked()


def test_the_chat_settings_panel_leaves_the_header_whole_at_800_by_600(make_app, driver):
    h = make_app(free_port())
    h.window.resize(800, 600)
    h.window.show()
    h.window.show_page("Chat")
    driver.pump(0.3)
    page = h.chat_page
    page.toggle_settings()
    driver.pump(0.3)
    assert page.settings_panel.isVisible() and page.settings_panel.width() >= 200
    header = page.header
    assert header.width() >= header.minimumWidth(), (header.width(), header.minimumWidth())
    right = header.settings_button.mapTo(page, header.settings_button.rect().topRight()).x()
    assert right <= page.settings_panel.mapTo(page, page.settings_panel.rect().topLeft()).x()


def test_the_tool_question_shows_every_button_whole(make_app, driver):
    """The dialog takes the theme's sheet as it shows (wider buttons): it grows to hold them."""
    from PySide6.QtWidgets import QPushButton

    from app.tool_loop import ToolCall
    from app.ui.tool_approval import ToolApprovalDialog

    h = make_app(free_port())
    h.window.resize(800, 600)
    h.window.show()
    driver.pump(0.2)
    call = ToolCall(id="c1", name="get_weather", arguments='{"city": "Lisbon"}', server="weather")
    dialog = ToolApprovalDialog(call, "weather", h.chat_page)
    dialog.open()
    driver.pump(0.3)
    cut = [(b.text(), b.width(), b.sizeHint().width()) for b in dialog.findChildren(QPushButton)
           if b.width() < b.sizeHint().width()]
    dialog.reject()
    assert not cut, cut


def test_hub_results_show_long_names_whole_in_a_narrow_window(make_app, driver):
    """Long repository names wrap in the Hugging Face results (no sideways scrolling) and each row
    is as tall as its wrapped text: the downloads line under the name stays in sight."""
    from PySide6.QtCore import Qt

    h = make_app(free_port())
    h.window.resize(1280, 800)  # the search in a wide window, then the window made small
    h.window.show()
    h.window.show_page("Models")
    mp = h.models_page
    mp.tabs.setCurrentWidget(mp.hub)
    hits = [{"repo": f"someone-with-a-long-name/SmolLM2-1.7B-Instruct-GGUF-{i}", "downloads": 184_000 - i,
             "likes": i} for i in range(3)]
    mp.hub.show_results("instruct", hits)
    driver.pump(0.3)
    h.window.show_page("Chat")  # resized while another page shows
    h.window.resize(800, 600)
    driver.pump(0.3)
    h.window.show_page("Models")
    driver.pump(0.3)
    view = mp.hub.results
    assert not view.horizontalScrollBar().isVisible()
    fm = view.fontMetrics()
    for row in range(view.count()):
        item = view.item(row)
        rect = view.visualItemRect(item)
        need = fm.boundingRect(rect.adjusted(0, 0, -8, 0), Qt.TextFlag.TextWrapAnywhere, item.text()).height()
        assert rect.height() >= need, (item.text(), rect.height(), need)
