"""Remote engines in the app: the Settings page adds and removes an upstream over HTTP, the
Models page lists its model with the "remote" badge and where prompts go, the Server page
shows its health. Real widgets offscreen; a real service in this process's loop with a
scripted upstream (both on loopback)."""

from __future__ import annotations


from aiohttp import web

from tests.remote.scripted import ScriptedUpstream


async def _site(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


def test_settings_add_models_badge_and_remove(driver, make_app, tmp_path):
    from runtime.config import ServeConfig
    from runtime.server.app import create_app

    upstream = ScriptedUpstream("ok", ["big-model"])
    up_runner, up_url = driver.run(_site(upstream.app()))
    # one data directory, as when the app starts the service: its confirmation token is the app's
    service = create_app(ServeConfig(data_dir=tmp_path / "app", preload=False))
    runner, url = driver.run(_site(service))
    try:
        h = make_app(int(url.rsplit(":", 1)[1]), data_dir=tmp_path / "app")
        box = h.remote_widgets["upstreams"]
        models_box = h.remote_widgets["models"]
        assert not models_box.isVisibleTo(h.models_page)  # nothing remote until the user adds it
        box.name.setText("gpu-box")
        box.url.setText(up_url)
        box.add_button.click()
        driver.until(lambda: "gpu-box" in box.remove_buttons, 20, "the upstream in the list")
        assert models_box.isVisibleTo(h.models_page)
        name, badge, line = models_box.labels[0]
        host = up_url.split("//")[1]
        assert (name.text(), badge.text()) == ("big-model@gpu-box", "remote")  # the name says where it goes
        assert f"prompts leave this computer, to {host}" in line.text()
        picker = h.chat_page.model_picker
        assert "big-model@gpu-box" in [picker.itemData(i) for i in range(picker.count())]  # chat can pick it
        h.service.health_changed.emit(driver.run(h.client.get("/health")))
        assert "gpu-box" in h.remote_widgets["health"].text() and "up" in h.remote_widgets["health"].text()
        assert h.remote_widgets["tray"].isVisible() and "gpu-box" in h.remote_widgets["tray"].text()
        box.name.setText("pub")
        box.url.setText("http://8.8.8.8:8000")
        box.add_button.click()
        driver.until(lambda: "allow-insecure" in box.message.text(), 20, "the refusal")
        box.remove_buttons["gpu-box"].click()
        driver.until(lambda: not box.remove_buttons, 20, "the upstream removed")
        assert not models_box.labels
    finally:
        driver.run(runner.cleanup())
        driver.run(up_runner.cleanup())
