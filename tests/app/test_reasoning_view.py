"""The answer view: reasoning collapsed above the answer, tool calls as blocks (real widgets,
offscreen), and the streamed deltas that fill them."""

from __future__ import annotations

from app.chat import _side_channels
from app.conversations import Message
from app.ui.message_view import MessageWidget


def test_streamed_reasoning_and_tool_calls_fill_the_meta():
    m = Message(1, "assistant", "", {})
    for delta in ({"reasoning_content": "Think"}, {"reasoning_content": "ing."},
                  {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                   "function": {"name": "get_time", "arguments": ""}}]},
                  {"tool_calls": [{"index": 0, "function": {"arguments": '{"tz": "UTC"}'}}]}):
        _side_channels(m, delta)
    assert m.meta["reasoning"] == "Thinking."
    assert m.meta["tool_calls"] == [{"id": "call_1", "name": "get_time", "arguments": '{"tz": "UTC"}'}]


def test_reasoning_is_collapsed_and_calls_are_blocks(qapp):
    m = Message(1, "assistant", "It is noon.", {"reasoning": "The user asks the time.",
                                               "tool_calls": [{"name": "get_time", "arguments": '{"tz": "UTC"}'}]})
    w = MessageWidget(m)
    w.show()
    assert w.reasoning_toggle.isVisible() and not w.reasoning.isVisible()
    w.reasoning_toggle.click()
    assert w.reasoning.isVisible() and "The user asks the time." in w.reasoning.text()
    assert w.reasoning_toggle.text().endswith("Hide reasoning")
    assert w.tool_calls.isVisible() and "get_time" in w.tool_calls.text() and "tz" in w.tool_calls.text()
    plain = MessageWidget(Message(2, "assistant", "Hello.", {}))
    plain.show()
    assert not plain.reasoning_toggle.isVisible() and not plain.tool_calls.isVisible()
