"""What the window says in words: banners in whole sentences with the advice on its own line, a
catalog search with no match that does not blame the service, and no "check the name" after a
click on a catalog entry (real widgets offscreen; a real loopback server that refuses)."""

from __future__ import annotations

from aiohttp import web

from app.api_types import CatalogModel
from app.errors import UserError
from app.ui.main_window import banner_html
from runtime.server.launcher import free_port


def test_banner_sentences_do_not_run_together():
    text = banner_html(UserError("The service is not reachable", "[Errno 111] Connection refused",
                                 "Press Restart to start it"))
    assert text == ("<b>The service is not reachable.</b> [Errno 111] Connection refused.<br>"
                    "Press Restart to start it.")
    assert "<script>" not in banner_html(UserError("x", "<script>", ""))  # detail text is escaped


def test_a_search_with_no_match_says_so(make_app, driver):
    h = make_app(free_port())
    h.models.catalog.set_entries([CatalogModel("smollm2-135m", "SmolLM2 135M", family="smollm2")])
    page = h.models_page
    page.search.setText("zebra")
    empty = page.catalog_list.empty
    assert empty.isVisibleTo(page.catalog_list)
    assert "zebra" in empty.text() and "service" not in empty.text()
    page.search.setText("")
    assert not empty.isVisibleTo(page.catalog_list)


def test_a_catalog_click_that_fails_does_not_ask_to_check_the_name(make_app, driver):
    async def refuse(request):
        return web.json_response({"error": {"message": "no space left on the disk", "code": "download_failed"}},
                                 status=507)

    app = web.Application()
    app.router.add_post("/hearth/models/pull", refuse)
    runner = web.AppRunner(app)
    driver.run(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    driver.run(site.start())
    try:
        h = make_app(runner.addresses[0][1])
        h.models.catalog.set_entries([CatalogModel("smollm2-135m", "SmolLM2 135M")])
        assert driver.run(h.models.pull("smollm2-135m")) is None
        text = h.window.banner.label.text()
        assert "no space left" in text and "Check the name" not in text
        assert driver.run(h.models.pull("someone/typo-GGUF")) is None
        assert "Check the name" in h.window.banner.label.text()  # a typed reference may be misspelt
    finally:
        driver.run(runner.cleanup())
