"""Hugging Face out of reach (a real service whose hub address answers nothing): a search gives
up within the app's wait, says why in words, and a search on its way can be cancelled."""

from __future__ import annotations

import os
import time

import pytest

from app.hub_problems import HUB_WAIT_S
from runtime.server.launcher import ServiceProcess, free_port


@pytest.fixture(scope="module")
def offline_service(smollm2_path, tmp_path_factory):
    """A service whose hub is a loopback port nothing listens on (its client retries for ~24 s)."""
    env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}",
           "HF_HOME": str(tmp_path_factory.mktemp("hf-home")), "HF_HUB_DISABLE_TELEMETRY": "1"}
    s = ServiceProcess("--ctx", "2048", env=env).wait_ready()
    yield s
    s.stop()


def _hub_tab(h, driver):
    assert driver.run(h.start())
    page = h.models_page
    h.window.show()
    h.window.show_page("Models")
    page.tabs.setCurrentWidget(page.hub)
    driver.pump(0.05)
    return page.hub


def test_an_offline_search_gives_up_soon_and_says_why(offline_service, driver, make_app):
    h = make_app(offline_service.port)
    hub = _hub_tab(h, driver)
    hub.query.setText("qwen")
    t0 = time.monotonic()
    hub.search_button.click()
    assert hub.cancel_button.isVisible() and not hub.search_button.isEnabled()
    driver.until(lambda: hub.search_button.isEnabled(), 30, "the search to end")
    waited = time.monotonic() - t0
    assert waited < HUB_WAIT_S + 3, f"the search spun {waited:.0f} s"
    status = hub.status.text()
    assert "internet connection" in status and "Hugging Face" in status, status
    assert not hub.cancel_button.isVisible()
    shown = h.window.banner.label.text()
    assert "could not be searched" in shown and "internet connection" in shown, shown
    assert "Errno" not in shown and "Errno" not in status


def test_a_search_on_its_way_can_be_cancelled(offline_service, driver, make_app):
    h = make_app(offline_service.port)
    hub = _hub_tab(h, driver)
    hub.query.setText("llama")
    hub.search_button.click()
    driver.pump(0.5)
    assert hub.cancel_button.isVisible()
    hub.cancel_button.click()
    assert hub.status.text() == "Search cancelled." and hub.search_button.isEnabled()
    assert not hub.cancel_button.isVisible()
    driver.pump(HUB_WAIT_S + 1)  # the cancelled search says nothing later
    assert hub.status.text() == "Search cancelled." and not h.window.banner.isVisible()
