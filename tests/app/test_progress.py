"""Progress for the waits that take seconds or minutes: indexing a document (passages embedded,
of how many), loading a model (a busy bar and the seconds so far), stopping the service (until
its process has ended). Real widgets offscreen, a loopback server that answers slowly, a real
child process that takes its time to stop."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from aiohttp import web

from app.service import STOPPED


def _slow_server(driver, delay_s: float):
    calls = {"embed": 0}

    async def health(request):
        return web.json_response({"status": "ok", "service": "hearth"})

    async def embeddings(request):
        body = await request.json()
        calls["embed"] += 1
        await asyncio.sleep(delay_s)
        return web.json_response({"data": [{"index": i, "embedding": [1.0, float(i), 0.5]}
                                           for i in range(len(body["input"]))]})

    async def load(request):
        await asyncio.sleep(delay_s)
        return web.json_response({"id": request.match_info["mid"], "loaded": True})

    async def empty(request):
        return web.json_response({"models": [], "data": []})

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_post("/hearth/models/{mid}/load", load)
    app.router.add_get("/hearth/stats", empty)
    app.router.add_get("/v1/models", empty)
    runner = web.AppRunner(app)
    driver.run(runner.setup())
    driver.run(web.TCPSite(runner, "127.0.0.1", 0).start())
    return runner, calls


def test_indexing_a_document_shows_passages_done_of_all(driver, make_app, tmp_path):
    runner, calls = _slow_server(driver, 0.4)
    try:
        h = make_app(runner.addresses[0][1])
        h.window.show()
        doc = tmp_path / "long.txt"
        doc.write_text("\n\n".join(f"Paragraph {i}. " + "words " * 140 for i in range(80)))
        h.chat.new_conversation()
        strip = h.chat_page.document_strip
        seen: list[str] = []
        h.documents.indexing.connect(lambda name, done, total: seen.append(strip.progress.label.text()))
        task = h.spawn(h.documents.add(doc, h.chat.current))
        driver.until(lambda: calls["embed"] >= 1 and strip.progress.isVisibleTo(h.window), 10, "indexing to show")
        driver.until(lambda: "32 of" in strip.progress.label.text(), 10,
                     lambda: f"progress after the first batch, saw {strip.progress.label.text()!r}")
        text = strip.progress.label.text()
        assert text.startswith("Indexing long.txt: 32 of ") and "passages" in text and "%" in text
        assert 0 < strip.progress.bar.value() < strip.progress.bar.maximum()
        driver.until(task.done, 30, "indexing to end")
        assert task.result() is not None
        assert not strip.progress.isVisibleTo(h.window) and strip.isVisibleTo(h.window)  # the chip stays
        assert any(s.startswith("Reading long.txt") for s in seen)
    finally:
        driver.run(runner.cleanup())


def test_loading_a_model_shows_a_busy_line_that_counts_seconds(driver, make_app):
    runner, _ = _slow_server(driver, 1.4)
    try:
        h = make_app(runner.addresses[0][1])
        h.window.show()
        line = h.chat_page.load_progress
        task = h.spawn(h.models.load("qwen2.5-3b"))
        driver.until(lambda: line.isVisibleTo(h.window), 5, "the loading line")
        assert line.label.text() == "Loading qwen2.5-3b into memory…" and line.bar.maximum() == 0  # busy bar
        driver.until(lambda: line.label.text().endswith(" 1 s"), 5, "the seconds to count")
        driver.until(task.done, 10, "the load")
        assert not line.isVisibleTo(h.window)
    finally:
        driver.run(runner.cleanup())


def test_stopping_the_service_shows_progress_until_it_has_ended(driver, make_app):
    from runtime.server.launcher import free_port

    h = make_app(free_port())
    h.window.show()
    h.window.show_page("Server")
    slow = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: (time.sleep(1.2), sys.exit(0)))\n" \
           "time.sleep(60)\n"
    proc = subprocess.Popen([sys.executable, "-c", slow])
    try:
        driver.pump(0.3)  # its handler is installed
        h.service.proc = proc
        page = h.server_page
        task = h.spawn(h.service.stop())
        driver.until(lambda: page.progress.isVisibleTo(page), 5, "the stopping line")
        assert page.progress.label.text().startswith("Stopping the service")
        assert page.status.text() == "Stopping…" and not page.stop_button.isEnabled()
        driver.until(task.done, 20, "the stop")
        assert proc.poll() is not None and h.service.state == STOPPED
        assert not page.progress.isVisibleTo(page)
    finally:
        if proc.poll() is None:
            proc.kill()
