"""An answer cut by a crash (the model's worker killed mid-stream, a real service) is stored and
shown as interrupted, with what arrived, without the numbers of a complete answer; the banner
goes once a later answer completes. A stream that simply ends before its end marker (a real
loopback server) is interrupted too, never ``finish: stop``."""

from __future__ import annotations

import os
import signal

from aiohttp import web

from app.conversations import ConversationStore, Sampling


def test_a_crash_mid_answer_is_stored_as_interrupted(service, driver, make_app, tmp_path):
    h = make_app(service.port)
    assert driver.run(h.start())
    h.chat.new_conversation()
    h.chat.configure(sampling=Sampling(temperature=0.0, top_p=1.0, max_tokens=1500, seed=3))
    h.chat_page.input.setPlainText("Count from 1 to 500, one number per line.")
    h.chat_page.send_button.click()
    driver.until(lambda: len(h.chat.messages.item(1).content) > 20, 120, "the first streamed text")
    pid = next(m["pid"] for m in service.stats()["models"] if m.get("pid"))
    os.kill(pid, signal.SIGKILL)
    driver.until(lambda: not h.chat.busy, 60, "the cut answer to end")

    answer = h.chat.messages.item(1)
    assert answer.meta["finish"] == "interrupted", answer.meta
    assert answer.content.strip() and "tokens_per_s" not in answer.meta and "completion_tokens" not in answer.meta
    saved = ConversationStore(tmp_path / "conversations.sqlite3")
    stored = saved.messages(h.chat.current.id)[1]
    saved.close()
    assert stored.meta["finish"] == "interrupted" and stored.content == answer.content
    widget = h.chat_page.view.widget_at(1)
    assert "interrupted" in widget.stats.text() and widget.error.isVisibleTo(widget)
    assert widget.property("finish") == "interrupted"
    banner = h.window.banner
    assert banner.isVisibleTo(h.window)

    # the recovery the banner asks for: send again; the model reloads and the banner goes
    h.chat.configure(sampling=Sampling(temperature=0.0, top_p=1.0, max_tokens=8, seed=3))
    h.chat_page.input.setPlainText("Say hello.")
    h.chat_page.send_button.click()
    driver.until(lambda: not h.chat.busy, 180, "the answer after the reload")
    assert h.chat.messages.item(3).meta["finish"] in ("stop", "length"), h.chat.messages.item(3).meta
    assert not banner.isVisibleTo(h.window), f"the banner outlived the recovery: {banner.label.text()}"


def test_a_stream_that_ends_early_is_interrupted(driver, make_app):
    async def health(request):
        return web.json_response({"status": "ok", "service": "hearth", "engine": {"state": "idle"}})

    async def chat(request):
        r = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await r.prepare(request)
        chunk = '{"model": "m", "choices": [{"index": 0, "delta": {"content": "Half an ans"}}]}'
        await r.write(f"data: {chunk}\n\n".encode())
        return r  # closed with neither a finish reason nor [DONE]

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    driver.run(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    driver.run(site.start())
    try:
        h = make_app(runner.addresses[0][1])
        h.chat.new_conversation()
        assert h.chat.send("Tell me everything.")
        driver.until(lambda: not h.chat.busy, 30, "the answer to end")
        answer = h.chat.messages.item(1)
        assert answer.content == "Half an ans" and answer.meta["finish"] == "interrupted", answer.meta
    finally:
        driver.run(runner.cleanup())
