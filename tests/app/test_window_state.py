"""The window comes back as it was left: its size (or maximized) and the chat that was open, from a
small file in the data directory; a damaged file gives the defaults (real windows offscreen)."""

from __future__ import annotations

from runtime.server.launcher import free_port


def test_size_and_open_chat_come_back_at_the_next_start(make_app, driver, tmp_path):
    first = make_app(free_port(), data_dir=tmp_path)
    first.window.show()
    a = first.chat.store.create("First chat")
    b = first.chat.store.create("Second chat")
    first.chat.reload()
    first.chat.select(b.id)
    first.window.resize(1010, 705)
    driver.pump(0.2)
    driver.run(first.shutdown(), 60)
    again = make_app(free_port(), data_dir=tmp_path)
    room = again.window.screen().availableGeometry()  # a size larger than the screen is cut to it
    assert (again.window.width(), again.window.height()) == (min(1010, room.width()), min(705, room.height()))
    assert again.window.height() == 705
    assert again.chat.current is not None and again.chat.current.id == b.id != a.id
    driver.run(again.shutdown(), 60)


def test_a_damaged_or_absurd_state_file_gives_the_defaults(make_app, driver, tmp_path):
    (tmp_path / "window-state.json").write_text('{"width": -5, "height": "tall", "conversation": 99999}')
    h = make_app(free_port(), data_dir=tmp_path)
    assert h.window.width() > 0 and h.window.height() > 0
    assert h.chat.current is None or h.chat.current.id != 99999
    (tmp_path / "window-state.json").write_text("{not json")
    again = make_app(free_port(), data_dir=tmp_path)
    assert again.window.width() > 0
