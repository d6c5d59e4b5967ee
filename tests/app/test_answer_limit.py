"""An answer's speed is shown beside the decode limit the service reported for its model (the
memory wall of its placement): the chat service copies the figure from the service's stats into
the answer when it ends (a real service, the embedded model)."""

from __future__ import annotations

from app.conversations import Sampling


def test_an_answer_carries_its_models_decode_limit(service, driver, make_app):
    h = make_app(service.port)
    assert driver.run(h.start())
    h.chat.new_conversation()
    h.chat.configure(sampling=Sampling(temperature=0.0, top_p=1.0, max_tokens=8, seed=3))
    assert h.chat.send("Say hello.")
    driver.until(lambda: not h.chat.busy, 180, "the answer")
    driver.run(h.models.refresh_running())
    row = next(m for m in service.stats()["models"] if m.get("pid"))
    limit = row.get("decode_limit_tps")
    assert isinstance(limit, float) and limit > 0  # the plan made when the model loaded
    assert h._decode_limit(row["id"]) == limit
    # the answer that just ended took the figure known when it ended (the stats the app polls)
    h.chat.configure(sampling=Sampling(temperature=0.0, top_p=1.0, max_tokens=8, seed=3))
    assert h.chat.send("Say goodbye.")
    driver.until(lambda: not h.chat.busy, 180, "the second answer")
    answer = h.chat.messages.item(3)
    assert answer.meta.get("decode_limit_tps") == limit, answer.meta
    if limit is not None:
        assert "of this machine's limit" in h.chat_page.view.widget_at(3).stats.text()
