"""The app and the service's life: start one when none runs, notice when it dies and restart it,
refuse a port that another program holds, and closing without a tray."""

from __future__ import annotations

import socket

from aiohttp import web

from runtime.server.launcher import free_port


def test_app_starts_the_service_and_restarts_it_after_it_dies(smollm2_path, driver, make_app):
    h = make_app(free_port())
    assert driver.run(h.start(), 240)
    assert h.service.owned and h.service.state == "running"
    child = h.service.proc
    driver.until(lambda: h.service.loaded_model == "smollm2-135m", 180, "the default model to load")
    assert "listening on" in "\n".join(h.service.log)
    assert "Running" in h.server_page.status.text()
    assert h.server_page.stop_button.isEnabled()

    child.kill()
    driver.until(lambda: h.service.state == "died", 30, "the app to notice the service died")
    banner = h.window.banner
    assert banner.isVisibleTo(h.window)
    assert "stopped" in banner.label.text() and banner.action.text() == "Restart server"
    assert h.tray.start_action.isEnabled()

    banner.action.click()
    driver.until(lambda: h.service.state == "running", 240, "the restarted service")
    assert h.service.proc is not child and h.service.owned
    driver.until(lambda: not banner.isVisibleTo(h.window), 10, "the banner to clear")

    # Stop from the server page: the child ends and the state says so.
    proc = h.service.proc
    h.server_page.stop_button.click()
    driver.until(lambda: h.service.state == "stopped", 30, "the service to stop")
    assert proc.poll() is not None
    assert h.server_page.start_button.isEnabled()


def test_a_port_held_by_another_program_is_named(driver, make_app):
    async def other(request):
        return web.Response(text="<html>someone else</html>", content_type="text/html")

    app = web.Application()
    app.router.add_get("/health", other)
    runner = web.AppRunner(app)
    driver.run(runner.setup())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    site = web.TCPSite(runner, "127.0.0.1", port)
    driver.run(site.start())
    try:
        h = make_app(port)
        assert driver.run(h.start()) is False
        assert h.service.state == "foreign" and h.service.proc is None
        text = h.window.banner.label.text()
        assert f"Port {port} is used by another program" in text
        assert h.window.banner.action.text() == "Open Settings"
        h.window.banner.action.click()
        assert h.window.stack.currentWidget() is h.window.pages["Settings"]
        assert h.settings_page.isVisibleTo(h.window)  # the port is on the General tab, shown first
    finally:
        driver.run(runner.cleanup())


def test_closing_without_a_tray_quits_and_says_why_once(driver, make_app, tmp_path):
    h = make_app(free_port(), tray_available=False)
    h.window.show()
    h.window.close()
    notice = h.no_tray_notice
    assert notice is not None and notice.isVisible()
    assert "no system tray" in notice.text()
    assert h.settings_store.load().told_no_tray
    notice.accept()
    driver.until(lambda: h.closed.done(), 30, "the app to quit")

    again = make_app(free_port(), tray_available=False)
    again.window.show()
    again.window.close()
    assert again.no_tray_notice is None  # told once
    driver.until(lambda: again.closed.done(), 30, "the app to quit")


def test_closing_with_a_tray_keeps_running(driver, make_app):
    h = make_app(free_port(), tray_available=True)
    h.window.show()
    h.window.close()
    assert not h.window.isVisible() and not h.closed.done()
    h.tray.open_action.trigger()
    assert h.window.isVisible()
    h.tray.quit_action.trigger()
    driver.until(lambda: h.closed.done(), 30, "quit from the tray")
