"""The context meter (real widgets offscreen): the service's count for the last answer plus an
estimate of what follows, against the chat's context; it warns before the context is full."""

from __future__ import annotations

from app.context_use import context_use
from app.conversations import Message
from runtime.server.launcher import free_port


def test_the_count_comes_from_the_last_answer_and_estimates_the_rest():
    msgs = [Message(1, "user", "x" * 400), Message(2, "assistant", "y" * 400,
                                                   {"prompt_tokens": 120, "completion_tokens": 95, "finish": "stop"}),
            Message(3, "user", "z" * 40)]
    use = context_use(msgs, "w" * 40, 1000)
    assert use.counted and use.used == 120 + 95 + 80 // 4 + 4 and not use.warn
    rough = context_use(msgs[:1], "", 100)  # nothing counted yet: all estimated
    assert not rough.counted and rough.used == 400 // 4 + 4 and rough.warn
    cut = msgs[:1] + [Message(2, "assistant", "y" * 40, {"prompt_tokens": 999, "finish": "interrupted"})]
    assert not context_use(cut, "", 2000).counted  # a cut answer's count is not trusted


def test_the_meter_in_the_window_warns_before_the_context_overflows(make_app, driver):
    h = make_app(free_port())
    h.window.show()
    c = h.chat.new_conversation()
    c.options["ctx"] = 1024
    h.chat.store.update(c)
    h.chat.store.add_message(c.id, "user", "Tell me a story.")
    h.chat.store.add_message(c.id, "assistant", "Once upon a time...", {"prompt_tokens": 300, "completion_tokens": 200,
                                                                       "finish": "stop"})
    h.chat.select(c.id)
    driver.until(lambda: h.chat_page.meter.use is not None and h.chat_page.meter.use.limit == 1024, 5, "the meter")
    meter = h.chat_page.meter
    assert "/ 1,024" in meter.label.text() and not meter.use.warn and meter.bar.isVisible()
    h.chat_page.input.setPlainText("word " * 400)  # ~500 tokens more: past 80 %
    driver.until(lambda: meter.use.warn, 5, "the warning")
    assert "almost full" in meter.label.text() or "full" in meter.label.text()
    assert meter.label.property("warn") is True


def _long_chat(h, model: str):
    c = h.chat.new_conversation()
    c.model = model
    h.chat.store.update(c)
    for i in range(40):
        h.chat.store.add_message(c.id, "user", f"Day {i}: " + "the wind rose and the sails held. " * 8)
        h.chat.store.add_message(c.id, "assistant", f"Logged day {i}: " + "fair weather, steady course. " * 6,
                                 {"finish": "stop"})
    h.chat.select(c.id)
    return c


def test_a_chat_longer_than_the_context_leaves_out_its_middle_and_the_meter_says_how_much(service, driver, make_app):
    """A chat of 40 turns against a 2,048-token context: by default the chat leaves out whole turns
    after the first (the service's truncate_middle), the meter shows the service's count of what
    is sent and how many messages are left out, and a new question is answered; with the policy
    set to stop, the same chat ends in the context error."""
    import httpx

    from app.conversations import Sampling

    h = make_app(service.port)
    assert driver.run(h.start())
    c = _long_chat(h, "smollm2-135m")
    meter = h.chat_page.meter
    driver.until(lambda: meter.use is not None and meter.use.dropped > 0, 60, "the service's count")
    body = h.chat._request_body(c, h.chat.messages.items())
    direct = httpx.post(f"http://127.0.0.1:{service.port}/hearth/count_tokens", json=body, timeout=60).json()
    assert body["context_overflow"] == "truncate_middle"
    assert (meter.use.used, meter.use.dropped) == (direct["prompt_tokens"], direct["dropped_messages"])
    assert f"{direct['dropped_messages']} older messages left out" in meter.label.text()
    h.chat.configure(sampling=Sampling(temperature=0.0, top_p=1.0, max_tokens=8, seed=3))
    assert h.chat.send("What happened on the first day?")
    driver.until(lambda: not h.chat.busy, 180, "the answer")
    answer = h.chat.messages.items()[-1]
    assert answer.meta.get("finish") in ("stop", "length"), answer.meta
    stopped = _long_chat(h, "smollm2-135m")
    h.chat.configure(sampling=Sampling(temperature=0.0, top_p=1.0, max_tokens=8, seed=3, context_overflow="stop"))
    errors: list[str] = []
    h.chat.error.connect(errors.append)
    assert h.chat.send("What happened on the first day?")
    driver.until(lambda: not h.chat.busy, 180, "the refusal")
    assert errors and "context" in errors[-1].text().lower(), errors
    assert h.chat.current.id == stopped.id and h.chat.current.sampling.context_overflow == "stop"


def test_an_empty_chat_is_counted_without_asking_the_service(service, driver, make_app):
    """A new chat with no message and no system prompt sends nothing yet: its count is 0, and the
    service (which refuses an empty message list) is not asked."""
    h = make_app(service.port)
    assert driver.run(h.start())
    c = h.chat.new_conversation()
    c.model, c.system_prompt = "smollm2-135m", ""
    h.chat.store.update(c)
    h.chat.select(c.id)
    assert driver.run(h.chat.count_next()) == {"prompt_tokens": 0, "dropped_messages": 0}
