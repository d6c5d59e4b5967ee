"""Tool-call and reasoning parsers per family, on replies written in the families' published
formats, fed whole and in every two-way split and in 1-3 character chunks (so chunk
boundaries fall inside the markup)."""

from __future__ import annotations

import asyncio
import json

import pytest

from runtime.engine.constraint import compile_constraint
from runtime.server.generate.output_events import (
    OutputParser, ReasoningDelta, TextDelta, ToolCallArgsDelta, ToolCallEnd, ToolCallStart, parse_all,
)
from runtime.server.generate.tool_formats import FORMATS, detect_format

W = {"city": "Paris", "unit": "celsius"}
T = {"tz": "Europe/Paris"}

FIXTURES = [
    # Hermes 2 Pro / Qwen 2.5 / Qwen 3
    ("hermes", 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>',
     "Let me check.", [("get_weather", W)]),
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>\n'
               '<tool_call>\n{"name": "get_time", "arguments": {"tz": "Europe/Paris"}}\n</tool_call>',
     "", [("get_weather", W), ("get_time", T)]),
    # SmolLM2's function-calling format: a list inside one block
    ("smollm2", '<tool_call>[{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}, '
                '{"name": "get_time", "arguments": {"tz": "Europe/Paris"}}]</tool_call>',
     "", [("get_weather", W), ("get_time", T)]),
    # Llama 3.1: bare JSON with "parameters", and <|python_tag|> forms
    ("llama3", '{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}', "", [("get_weather", W)]),
    ("llama3", '<|python_tag|>{"name": "get_time", "parameters": {"tz": "Europe/Paris"}}', "", [("get_time", T)]),
    ("llama3", '<|python_tag|>brave_search.call(query="weather in Paris")', "",
     [("brave_search", {"query": "weather in Paris"})]),
    # Mistral Nemo / 7B v0.3, and the newer name[ARGS]{...} form
    ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}, "id": "a1b2c3d4e"}]',
     "", [("get_weather", W)]),
    ("mistral", '[TOOL_CALLS]get_time[ARGS]{"tz": "Europe/Paris"}', "", [("get_time", T)]),
    # Phi-4-mini
    ("phi4", '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}]<|/tool_call|>',
     "", [("get_weather", W)]),
    # Gemma 3 (tool_code block of Python calls)
    ("gemma", 'I will look it up.\n```tool_code\nget_weather(city="Paris", unit="celsius")\n```', "I will look it up.",
     [("get_weather", W)]),
    # the generic JSON fallback
    ("generic", '{"tool_calls": [{"name": "get_time", "arguments": {"tz": "Europe/Paris"}}]}', "", [("get_time", T)]),
    # no call: plain text passes through, even with a lone "<" or "{"
    ("hermes", "Use a < b and {braces}.", "Use a < b and {braces}.", []),
    ("llama3", "It is sunny.", "It is sunny.", []),
]


def _events(fmt, chunks, think=None, in_reasoning=False):
    p = OutputParser(fmt, think, in_reasoning)
    events = []
    for c in chunks:
        events += p.feed(c)
    return events + p.finish(), p


def _check(events, text, calls):
    got_text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert got_text == text
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [(s.index, s.name) for s in starts] == [(i, n) for i, (n, _) in enumerate(calls)]
    for i, (_, args) in enumerate(calls):
        frags = "".join(e.fragment for e in events if isinstance(e, ToolCallArgsDelta) and e.index == i)
        assert json.loads(frags) == args
    order = [type(e).__name__ for e in events if not isinstance(e, (TextDelta, ReasoningDelta))]
    # each call: its start, its arguments in one or more pieces (as written), its end
    merged = [k for i, k in enumerate(order) if not (k == "ToolCallArgsDelta" and order[i - 1] == k)]
    assert merged == ["ToolCallStart", "ToolCallArgsDelta", "ToolCallEnd"] * len(calls)
    assert len({s.id for s in starts}) == len(starts)
    for e in events:  # no markup ever reaches the text
        if isinstance(e, TextDelta):
            for marker in ("<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|python_tag|>", "<|tool_call|>", "tool_code"):
                assert marker not in e.text


@pytest.mark.parametrize("family,reply,text,calls", FIXTURES)
def test_whole_and_split_replies(family, reply, text, calls):
    fmt = FORMATS[family]
    _check(_events(fmt, [reply])[0], text, calls)
    for cut in range(1, len(reply)):
        _check(_events(fmt, [reply[:cut], reply[cut:]])[0], text, calls)
    for size in (1, 2, 3):
        _check(_events(fmt, [reply[i:i + size] for i in range(0, len(reply), size)])[0], text, calls)


def test_reasoning_is_split_from_the_answer_and_calls():
    reply = '<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'
    for size in (1, 4, len(reply)):
        events, p = _events(FORMATS["hermes"], [reply[i:i + size] for i in range(0, len(reply), size)],
                            think=("<think>", "</think>"))
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
        assert reasoning.strip() == "The user wants weather."
        _check(events, "", [("get_weather", W)])
    # a template that opened the block in the prompt (DeepSeek-R1 distills)
    text, reasoning, calls = parse_all("Two plus two.</think>It is 4.", None, ("<think>", "</think>"), True)
    assert (text, reasoning, calls) == ("It is 4.", "Two plus two.", [])
    # no thinking block at all
    assert parse_all("Just the answer.", None, ("<think>", "</think>"))[:2] == ("Just the answer.", "")


def test_invalid_calls_come_back_as_text():
    reply = '<tool_call>\n{"name": "get_weather", "arguments": {"city": 3}}\n</tool_call>'
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    import jsonschema

    def accept(name, args):
        try:
            jsonschema.validate(args, schema)
        except jsonschema.ValidationError:
            return False
        return True

    text, _, calls = parse_all(reply, FORMATS["hermes"], accept=accept)
    assert calls == [] and '"city": 3' in text
    # cut off inside the call: its text is kept
    text, _, calls = parse_all('<tool_call>\n{"name": "get_wea', FORMATS["hermes"])
    assert calls == [] and text == '<tool_call>\n{"name": "get_wea'
    text, _, calls = parse_all('{"tool_calls": [{"name": "get_wea', FORMATS["generic"])
    assert calls == [] and text == '{"tool_calls": [{"name": "get_wea'


@pytest.mark.parametrize("template,family", [
    ("{% for m in messages %}<|im_start|>{{ m.role }}{% if tools %}<tools>{% endif %}<tool_call>{% endfor %}", "hermes"),
    ("<|start_header_id|>{% if tools %}...{% endif %}<|python_tag|>", "llama3"),
    ("[AVAILABLE_TOOLS]{{ tools }}[TOOL_CALLS]", "mistral"),
    ("<|system|>{{ tools }}<|tool_call|>", "phi4"),
    ("<start_of_turn>user\n{{ content }}<end_of_turn>", "gemma"),
    ("<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>", "smollm2"),
    (None, "generic"),
])
def test_family_detection(template, family):
    assert detect_format(template).name == family


@pytest.mark.parametrize("family", sorted(FORMATS))
def test_grammar_output_parses_back(family):
    """What each family's grammar allows is what its parser reads (the grammar's own text)."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    fmt = FORMATS[family]
    compile_constraint("lark", fmt.grammar(tools, True))
    rendered = fmt.render_calls([("get_weather", {"city": "Paris"})]) if family not in ("llama3", "gemma") else (
        '{"name": "get_weather", "parameters": {"city": "Paris"}}' if family == "llama3"
        else '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}')
    _, _, calls = parse_all(rendered, fmt)
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("get_weather", {"city": "Paris"})]


def test_history_for_templates_without_tools():
    """Earlier calls and results are written in the family's markup, with or without tools."""
    from runtime.sampling_params import SamplingParams
    from runtime.server.generate.request import GenerationRequest
    from runtime.server.generate.tool_calls import plan_output, tool_messages

    raw = [{"role": "user", "content": "Time?"},
           {"role": "assistant", "content": None, "tool_calls": [
               {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": '{"tz": "UTC"}'}}]},
           {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}]
    chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"
    for tools, choice in (([{"type": "function", "function": {"name": "get_time"}}], "auto"), (None, "none")):
        req = GenerationRequest(None, SamplingParams(), messages=tool_messages(
            [{"role": m["role"], "content": m["content"] or ""} for m in raw], raw))
        req.tools, req.tool_choice = tools, choice
        plan = asyncio.run(plan_output(req, chatml))
        roles = [m["role"] for m in req.messages]
        assert roles == (["system", "user", "assistant", "user"] if tools else ["user", "assistant", "user"])
        assert req.messages[-2]["content"] == '<tool_call>[{"name": "get_time", "arguments": {"tz": "UTC"}}]</tool_call>'
        assert "12:00" in req.messages[-1]["content"] and "tool_response" in req.messages[-1]["content"]
        assert (plan is not None) == bool(tools)
        if tools:
            assert req.constraint.trigger == "<tool_call>" and "get_time" in req.messages[0]["content"]


def test_json_arguments_stream_as_written_and_a_cut_call_ends_incomplete():
    from runtime.server.generate.tool_formats import HERMES

    reply = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa}ris", "n": [1, 2]}}\n</tool_call>'
    events, p = _events(HERMES, list(reply))  # one character at a time, as tokens come
    pieces = [e.fragment for e in events if isinstance(e, ToolCallArgsDelta)]
    assert len(pieces) > 10 and "".join(pieces) == '{"city": "Pa}ris", "n": [1, 2]}'
    assert p.calls[0]["arguments"] == "".join(pieces)
    cut, _ = _events(HERMES, list(reply[:50]))  # max_tokens ends it inside the arguments
    ends = [e for e in cut if isinstance(e, ToolCallEnd)]
    assert [e.complete for e in ends] == [False]
    assert not any(isinstance(e, TextDelta) and "tool_call" in e.text for e in cut)
