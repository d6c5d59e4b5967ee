"""`hearth app --tray`, what the login item runs: the window stays hidden where a tray can
bring it back, and opens anyway where there is none."""

from __future__ import annotations


def test_tray_start_hides_the_window_only_where_a_tray_exists(make_app, driver, service):
    with_tray = make_app(service.port, tray_available=True)
    assert driver.run(with_tray.start(show_window=False))
    assert not with_tray.window.isVisible()
    with_tray.open_window()  # the tray's "Open Hearth"
    assert with_tray.window.isVisible()

    without_tray = make_app(service.port, tray_available=False)
    assert driver.run(without_tray.start(show_window=False))
    assert without_tray.window.isVisible()
