"""Problems in words, each with what to do (real widgets offscreen, real servers on loopback): a
message sent while the service is stopped says so and offers Start; a hub out of reach is "can't
reach huggingface.co", never a socket's errno or advice about disk space; a damaged file the user
imported is theirs to import again or replace, not to "download again"."""

from __future__ import annotations

import html
import json

from aiohttp import web

from runtime.server.launcher import free_port
from tests.store.hubfiles import tiny_model


def test_sending_to_a_stopped_service_says_so_and_offers_start(make_app, driver):
    h = make_app(free_port())
    h.window.show()
    assert not driver.run(h.service.recheck())  # nothing answers at the address: stopped
    assert h.service.state == "stopped"
    h.chat.new_conversation()
    h.chat_page.input.setPlainText("Hello?")
    h.chat_page.send_button.click()
    driver.until(lambda: not h.chat.busy, 30, "the attempt to end")
    banner = h.window.banner
    text = html.unescape(banner.label.text())
    assert "The service is not running" in text and f"Nothing answers at {h.service.url}" in text, text
    assert "Error" not in text and "Errno" not in text  # no exception's name or number
    assert banner.action.isVisibleTo(h.window) and banner.action.text() == "Start server"
    banner.action.click()
    driver.until(lambda: h.service.state == "running", 180, lambda: f"the service to start ({h.service.state})")
    driver.until(lambda: not banner.isVisibleTo(h.window), 10, "the banner to go once the service answers")


def _fake_service(driver, routes: dict):
    """A loopback server that answers as the service does on ``routes`` (path: handler)."""
    async def health(request):
        return web.json_response({"status": "ok", "service": "hearth", "engine": {"state": "idle"}})

    app = web.Application()
    app.router.add_get("/health", health)
    for (method, path), handler in routes.items():
        app.router.add_route(method, path, handler)
    runner = web.AppRunner(app)
    driver.run(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    driver.run(site.start())
    return runner


def test_a_hub_out_of_reach_is_said_in_words(make_app, driver):
    offline = "cannot reach the hub at https://huggingface.co: [Errno -2] Name or service not known"

    async def pull(request):  # the service's answer when its hub client cannot resolve the hub
        return web.json_response({"error": {"message": offline, "code": "hub_error", "type": "server_error"}},
                                 status=502)

    async def events(request):  # a download that loses the network part way
        r = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await r.prepare(request)
        for d in ({"id": "d1", "model": "qwen2.5-7b", "state": "downloading"},
                  {"id": "d1", "model": "qwen2.5-7b", "state": "failed",
                   "error": "Cannot connect to host huggingface.co:443 ssl:default [Name or service not known]"}):
            await r.write(f"data: {json.dumps(d)}\n\n".encode())
        return r

    runner = _fake_service(driver, {("POST", "/hearth/models/pull"): pull,
                                    ("GET", "/hearth/downloads/events"): events})
    try:
        h = make_app(runner.addresses[0][1])
        banner = h.window.banner
        for ref in ("qwen2.5-7b", "someone/Model-GGUF:Q4_K_M"):
            assert driver.run(h.models.pull(ref)) is None
            text = html.unescape(banner.label.text())
            assert "Can't reach huggingface.co: check your internet connection" in text, text
            assert "Errno" not in text and "disk" not in text and "Check the name" not in text, text
            assert "once this computer is online" in text
        banner.show_problem(None)
        h.models.store_available = True
        h.models.follow_downloads()
        driver.until(lambda: banner.problem is not None, 10, "the failed download's banner")
        text = html.unescape(banner.label.text())
        assert "The download stopped" in text and "Can't reach huggingface.co" in text, text
        assert "Name or service" not in text and "disk" not in text and "Resume" in text
    finally:
        driver.run(runner.cleanup())


def test_a_damaged_imported_file_is_the_users_to_replace(service, driver, make_app, tmp_path):
    from runtime.config import data_dir

    h = make_app(service.port)
    assert driver.run(h.start())
    h.models.data_dir = data_dir()  # the service's import token lives there
    whole = tiny_model(tmp_path / "whole.gguf").read_bytes()
    cut = tmp_path / "Cut-Q8_0.gguf"
    cut.write_bytes(whole[: len(whole) // 2])  # a copy that stopped half way
    assert not driver.run(h.models.import_file(str(cut)))
    text = html.unescape(h.window.banner.label.text())
    assert "truncated" in text, text  # what is wrong with it, as the service found
    assert "download it again" not in text.lower(), text
    assert "import it again" in text and "choose another" in text, text
