"""The first-run suggestion: the best catalog model that fits this computer (from the planner's
verdicts the service puts on each catalog entry), offered once above the chat with its download's
progress and "Use it" when it is here. A loopback service answers the model API (real window
offscreen, real HTTP); the choice itself is checked on the real catalog's shapes of verdicts."""

from __future__ import annotations

from aiohttp import web

from app.api_types import CatalogModel
from app.first_run import suggest
from app.settings import SettingsStore


def _entry(mid, params, verdict, tps, *, task=None, local=False, size=None):
    fit = {"verdict": verdict, "fits": verdict != "too_big", "predicted_tokens_per_s": tps, "total_bytes": params}
    return {"id": mid, "name": mid.title(), "family": mid.split("-")[0], "repo": f"org/{mid}-GGUF",
            "default_quant": "Q4_K_M", "params": params, "parameters": f"{params // 10**9 or 0.5}B",
            "sizes": {"Q4_K_M": size or params // 2}, "local": local, "embedded": False, "fit": fit,
            **({"task": task} if task else {})}


CATALOG = [
    _entry("tiny-0.5b", 500_000_000, "cpu", 60.0),
    _entry("mid-3b", 3_000_000_000, "cpu", 14.0),
    _entry("big-8b", 8_000_000_000, "cpu", 5.0),          # fits, but too slow to read along
    _entry("huge-70b", 70_000_000_000, "too_big", None),
    _entry("embed-1b", 1_000_000_000, "cpu", 900.0, task="embedding"),
]


def test_the_suggestion_is_the_largest_model_that_fits_at_a_comfortable_speed():
    entries = [CatalogModel.from_api(e) for e in CATALOG]
    s = suggest(entries)
    assert s is not None and s.model_id == "mid-3b"
    assert "on the processor" in s.reason and "14 tokens per second" in s.reason
    # nothing comfortable: the quickest that fits; nothing that fits: no suggestion
    slow = [CatalogModel.from_api(_entry("a-7b", 7_000_000_000, "cpu", 4.0)),
            CatalogModel.from_api(_entry("b-3b", 3_000_000_000, "cpu", 7.5))]
    assert suggest(slow).model_id == "b-3b" and "quickest" in suggest(slow).reason
    assert suggest([CatalogModel.from_api(CATALOG[3]), CatalogModel.from_api(CATALOG[4])]) is None
    gpu = CatalogModel.from_api(_entry("g-8b", 8_000_000_000, "gpu", 45.0))
    assert suggest(entries + [gpu]).model_id == "g-8b"


def _answer(body: dict):
    async def handler(request):
        return web.json_response(body)
    return handler


def _fake_service(driver):
    """The model API of a service on this computer that has only its embedded model; a pull of
    ``mid-3b`` goes queued → half → completed over three reads of the download list."""
    steps = [{"state": "queued", "done_bytes": 0, "total_bytes": None},
             {"state": "downloading", "done_bytes": 750_000_000, "total_bytes": 1_500_000_000, "speed_bps": 9_000_000},
             {"state": "completed", "done_bytes": 1_500_000_000, "total_bytes": 1_500_000_000}]
    state = {"pulled": [], "reads": 0}

    def download():
        step = steps[min(state["reads"], len(steps) - 1)]
        return {"id": "d1", "model": "mid-3b", "ref": "mid-3b", **step}

    async def local(request):
        models = [{"id": "smollm2-135m", "name": "SmolLM2", "source": "embedded"}]
        if state["pulled"] and state["reads"] >= len(steps) - 1:
            models.append({"id": "mid-3b", "name": "Mid-3B", "source": "hub"})
        return web.json_response({"models": models})

    async def downloads(request):
        if not state["pulled"]:
            return web.json_response({"downloads": []})
        state["reads"] += 1
        return web.json_response({"downloads": [download()]})

    async def pull(request):
        state["pulled"].append((await request.json())["model"])
        return web.json_response({"id": "d1", "download": download()}, status=202)

    async def v1_models(request):
        return web.json_response({"data": [{"id": m, "capabilities": ["chat"]} for m in ("smollm2-135m", "mid-3b")]})

    app = web.Application()
    app.router.add_get("/health", _answer({"status": "ok", "service": "hearth"}))
    app.router.add_get("/hearth/models", local)
    app.router.add_get("/hearth/catalog", _answer({"models": CATALOG}))
    app.router.add_get("/hearth/downloads", downloads)
    app.router.add_post("/hearth/models/pull", pull)
    app.router.add_get("/hearth/stats", _answer({"models": []}))
    app.router.add_get("/v1/models", v1_models)
    app.router.add_get("/hearth/fit", _answer({"verdict": "cpu", "fits": True}))
    app.router.add_post("/hearth/models/{mid}/load", _answer({"ok": True}))
    runner = web.AppRunner(app)
    driver.run(runner.setup())
    driver.run(web.TCPSite(runner, "127.0.0.1", 0).start())
    return runner, state


def test_first_run_offers_downloads_and_uses_the_suggestion_once(driver, make_app, tmp_path):
    runner, state = _fake_service(driver)
    try:
        h = make_app(runner.addresses[0][1])
        h.window.resize(1000, 700)
        h.window.show()
        driver.run(h.refresh_models())
        card = h.chat_page.suggestion_card
        assert card.isVisibleTo(h.window)
        assert card.name.text() == "Mid-3B"
        assert "comfortable speed" in card.reason.full_text() and "Q4_K_M" in card.detail.full_text()
        assert card.download_button.isVisibleTo(card) and not card.use_button.isVisibleTo(card)

        card.download_button.click()
        driver.until(lambda: state["pulled"] == ["mid-3b"], 10, "the pull")
        driver.until(lambda: "50 %" in card.progress.full_text(), 10, lambda: f"half-way progress, saw {card.progress.full_text()!r}")
        assert card.bar.isVisibleTo(card) and card.bar.value() == 500 and not card.download_button.isVisibleTo(card)
        driver.until(lambda: card.use_button.isVisibleTo(card), 10, "the model to be here")
        assert "Downloaded" in card.progress.full_text()
        driver.until(lambda: "mid-3b" in [h.chat_page.model_picker.itemData(i)
                                          for i in range(h.chat_page.model_picker.count())], 10, "the picker")

        card.use_button.click()
        assert not card.isVisibleTo(h.window)
        assert h.chat.current is not None and h.chat.current.model == "mid-3b"
        assert h.chat_page.header.chat_model() == "mid-3b"
        assert SettingsStore(tmp_path / "app-settings.json").load().suggestion_done

        driver.run(h.refresh_models())  # settled: not offered again
        assert not card.isVisibleTo(h.window)
    finally:
        driver.run(runner.cleanup())


def test_not_now_is_remembered(driver, make_app, tmp_path):
    runner, state = _fake_service(driver)
    try:
        h = make_app(runner.addresses[0][1])
        h.window.show()
        driver.run(h.refresh_models())
        card = h.chat_page.suggestion_card
        assert card.isVisibleTo(h.window)
        card.later_button.click()
        assert not card.isVisibleTo(h.window) and not state["pulled"]
        assert SettingsStore(tmp_path / "app-settings.json").load().suggestion_done
    finally:
        driver.run(runner.cleanup())
