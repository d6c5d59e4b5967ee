"""A new port takes one click: saved in Settings, it waits for a restart (the Server page says
so), and Restart server stops the service the app runs and starts it on the new port (a real
service, real window offscreen)."""

from __future__ import annotations

import urllib.error
import urllib.request

from runtime.server.launcher import free_port


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
            return True
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def test_restart_moves_the_service_to_the_new_port(smollm2_path, make_app, driver):
    old, new = free_port(), free_port()
    h = make_app(old)
    assert driver.run(h.start(), 240) and h.service.owned
    page = h.server_page
    assert page.restart_button.isEnabled()
    h.settings_page.port.setValue(new)
    h.settings_page.save_button.click()
    assert h.service.pending_url.endswith(f":{new}") and f":{new}" in page.address.text()
    page.restart_button.click()
    driver.until(lambda: h.service.state == "running" and h.service.url.endswith(f":{new}"), 240,
                 lambda: f"the service on the new port ({h.service.state} at {h.service.url})")
    assert _answers(new) and not _answers(old)
    assert not h.service.pending_url and "after a restart" not in page.address.text()
