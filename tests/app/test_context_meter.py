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
