"""The blocks of an answer (real widgets, offscreen): code coloured with a Copy button, a JSON
answer formatted, tool calls that open to show arguments and result, fences cut apart while an
answer still streams."""

from __future__ import annotations

from PySide6.QtGui import QGuiApplication

from app.conversations import Message
from app.ui.blocks import CodeBlock
from app.ui.highlight import as_json, highlight_html, split_fences
from app.ui.message_view import MessageWidget


def test_fences_are_cut_into_text_and_code_even_while_open():
    text = "Here:\n\n```python\nx = 1\n```\n\nDone."
    assert split_fences(text) == [("text", "", "Here:\n"), ("code", "python", "x = 1"), ("text", "", "\nDone.")]
    assert split_fences("Start\n```js\nlet a") == [("text", "", "Start"), ("code", "js", "let a")]
    assert split_fences("no code") == [("text", "", "no code")]


def test_code_is_coloured_and_copied(qapp):
    html = highlight_html("def f():\n    return 1", "python", dark=False)
    assert "<span" in html and "color" in html and "def" in html
    assert highlight_html("<b>", "no-such-language", dark=True).count("&lt;") == 1  # escaped, not markup
    w = MessageWidget(Message(1, "assistant", "Try:\n\n```python\nprint('hi')\n```", {}))
    code = [p for p in w.body.parts if isinstance(p, CodeBlock)]
    assert len(code) == 1 and code[0].language.text() == "python"
    code[0].copy_button.click()
    assert QGuiApplication.clipboard().text() == "print('hi')" and code[0].copy_button.text() == "Copied"


def test_a_json_answer_is_shown_formatted(qapp):
    assert as_json('{"a": 1, "b": [1, 2]}') == '{\n  "a": 1,\n  "b": [\n    1,\n    2\n  ]\n}'
    assert as_json("not json {") is None and as_json("[1, 2") is None
    w = MessageWidget(Message(1, "assistant", '{"city": "Lisbon", "rain": true}', {}))
    (block,) = w.body.parts
    assert isinstance(block, CodeBlock) and block.language.text() == "json"
    assert '"city": "Lisbon"' in block.source and "\n" in block.source


def test_a_tool_call_block_opens_to_its_arguments_and_result(qapp):
    call = {"id": "c1", "name": "get_weather", "arguments": '{"city":"Oslo"}', "server": "weather",
            "status": "done", "result": "Snow, -3 °C", "seconds": 0.012}
    w = MessageWidget(Message(1, "assistant", "It snows.", {"tool_calls": [call]}))
    w.show()
    (block,) = w.tool_calls.blocks
    assert "get_weather" in block.toggle.text() and "done" in block.toggle.text() and "12 ms" in block.toggle.text()
    assert not block.details.isVisible()
    block.toggle.click()
    assert block.details.isVisible() and "Snow, -3 °C" in block.details.text() and "weather" in block.details.text()
    assert "&quot;city&quot;: &quot;Oslo&quot;" in block.details.text()  # pretty-printed arguments
    failed = MessageWidget(Message(2, "assistant", "", {"tool_calls": [{**call, "status": "timeout"}]}))
    assert "timed out" in failed.tool_calls.blocks[0].toggle.text()
    assert failed.tool_calls.blocks[0].property("status") == "timeout"
