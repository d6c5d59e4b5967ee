"""The speed under an answer beside the memory wall: "41.0 tok/s, 63% of this machine's limit"
(a real widget, offscreen)."""

from __future__ import annotations

from app.conversations import Message
from app.ui.message_widget import MessageWidget, stats_line


def test_the_answers_speed_shows_its_share_of_the_limit(qapp):
    w = MessageWidget(Message(1, "assistant", "Hello.", {"model": "smollm2-135m", "tokens_per_s": 41.0,
                                                         "decode_limit_tps": 65.1, "finish": "stop"}))
    w.show()
    assert w.stats.isVisible()
    assert "41.0 tok/s, 63% of this machine's limit" in w.stats.text()


def test_without_a_limit_the_speed_stands_alone():
    assert stats_line({"tokens_per_s": 41.0}) == "41.0 tok/s"
    assert stats_line({"tokens_per_s": 41.0, "decode_limit_tps": None}) == "41.0 tok/s"
    assert stats_line({"decode_limit_tps": 65.1}) == ""  # no speed (a cut answer): no share of anything
