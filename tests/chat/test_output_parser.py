"""The output parser's contract beyond llama.cpp's cases: arguments stream as written, a reply cut
inside a call, calls the service refuses, thinking opened by the prompt, and the history of calls
for a template that renders none."""

from __future__ import annotations

import asyncio
from pathlib import Path

from runtime.chat.contract import FALLBACK_CALLS, OutputContract
from runtime.chat.events import ReasoningDelta, TextDelta, ToolCallArgsDelta, ToolCallEnd, ToolCallStart
from runtime.chat.output_parser import OutputParser, parse_all
from runtime.chat.template_analysis import contract_for

TEMPLATES = Path(__file__).parent / "templates"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "array"}}}}}]


def _contract(name: str) -> OutputContract:
    return contract_for((TEMPLATES / f"{name}.jinja").read_text(), "<s>", "</s>")


def _events(contract, chunks, tools=TOOLS, in_reasoning=False, accept=None):
    p = OutputParser(contract, tools, in_reasoning, accept)
    return [e for c in chunks for e in p.feed(c)] + p.finish(), p


def test_json_arguments_stream_as_written_and_a_cut_call_ends_incomplete():
    qwen = _contract("Qwen-Qwen2.5-7B-Instruct")
    reply = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa}ris", "n": [1, 2]}}\n</tool_call>'
    events, p = _events(qwen, list(reply))  # one character at a time, as tokens come
    pieces = [e.fragment for e in events if isinstance(e, ToolCallArgsDelta)]
    assert len(pieces) > 10 and "".join(pieces) == '{"city": "Pa}ris", "n": [1, 2]}'
    assert p.calls[0]["arguments"] == "".join(pieces)
    cut, _ = _events(qwen, list(reply[:50]))  # max_tokens ends it inside the arguments
    assert [e.complete for e in cut if isinstance(e, ToolCallEnd)] == [False]
    assert not any(isinstance(e, TextDelta) and "tool_call" in e.text for e in cut)


def test_tagged_arguments_stream_one_value_at_a_time():
    coder = _contract("Qwen3-Coder")
    reply = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
             "<parameter=n>\n[1, 2]\n</parameter>\n</function>\n</tool_call>")
    events, p = _events(coder, list(reply))
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    pieces = [e.fragment for e in events if isinstance(e, ToolCallArgsDelta)]
    assert [s.name for s in starts] == ["get_weather"] and len(pieces) >= 3
    assert "".join(pieces) == p.calls[0]["arguments"] == '{"city": "Paris", "n": [1, 2]}'


def test_a_call_cut_before_its_name_is_kept_as_text():
    qwen = _contract("Qwen-Qwen2.5-7B-Instruct")
    text, _, calls = parse_all('<tool_call>\n{"name": "get_wea', qwen, TOOLS)
    assert calls == [] and text == '<tool_call>\n{"name": "get_wea'
    text, _, calls = parse_all('{"tool_calls": [{"name": "get_wea', OutputContract(calls=FALLBACK_CALLS), TOOLS)
    assert calls == [] and text == '{"tool_calls": [{"name": "get_wea'


def test_a_call_the_service_refuses_comes_back_as_text():
    qwen = _contract("Qwen-Qwen2.5-7B-Instruct")
    reply = '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>'
    text, _, calls = parse_all(reply, qwen, TOOLS, accept=lambda name, args: name == "get_weather")
    assert calls == [] and "rm_rf" in text


def test_thinking_opened_by_the_prompt_and_thinking_the_model_opens():
    r1 = _contract("deepseek-ai-DeepSeek-R1-Distill-Llama-8B")
    assert r1.reasoning is not None and r1.reasoning.opened
    assert parse_all("Two plus two.</think>It is 4.", r1, None, in_reasoning=True) == ("It is 4.", "Two plus two.", [])
    qwen3 = _contract("Qwen-Qwen3-0.6B")
    assert qwen3.reasoning is not None and not qwen3.reasoning.opened
    for size in (1, 3, 100):
        reply = "<think>\nThe user wants weather.\n</think>\n\nSunny."
        events, _ = _events(qwen3, [reply[i:i + size] for i in range(0, len(reply), size)])
        assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)).strip() == "The user wants weather."
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Sunny."
    assert parse_all("Just the answer.", qwen3)[:2] == ("Just the answer.", "")


def test_history_for_templates_without_tool_calls():
    """Earlier calls and results reach a template that renders neither, as text in the fallback
    shape; with tools offered, they are described in the system message."""
    from runtime.sampling_params import SamplingParams
    from runtime.server.generate.request import GenerationRequest, Message, ToolCall, ToolSpec
    from runtime.server.generate.tool_calls import plan_output
    from runtime.tool_choice import AUTO, NONE

    chatml = contract_for("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}")
    assert chatml.calls is None
    for tools, choice in (([ToolSpec("get_time")], AUTO), ([], NONE)):
        req = GenerationRequest(None, SamplingParams(), messages=[
            Message("user", "Time?"), Message("assistant", "", [ToolCall("call_1", "get_time", {"tz": "UTC"})]),
            Message("tool", "12:00", tool_call_id="call_1")], tools=tools, tool_choice=choice)
        plan = asyncio.run(plan_output(req, chatml))
        roles = [m.role for m in req.messages]
        assert roles == (["system", "user", "assistant", "user"] if tools else ["user", "assistant", "user"])
        assert req.messages[-2].content == '{"tool_calls": [{"name": "get_time", "arguments": {"tz": "UTC"}}]}'
        assert "12:00" in req.messages[-1].content and "tool_response" in req.messages[-1].content
        assert (plan is not None) == bool(tools)
        if tools:
            assert req.constraint.trigger == '{"tool_calls": [' and "get_time" in req.messages[0].content


def _whole_and_streamed(contract, reply, tools=TOOLS, in_reasoning=False, inline=False):
    """(answer, reasoning, calls) of ``reply`` read whole; the same read one character at a time."""
    out = []
    for chunks in ([reply], list(reply)):
        p = OutputParser(contract, tools, in_reasoning, inline_reasoning=inline)
        events = [e for c in chunks for e in p.feed(c)] + p.finish()
        out.append(("".join(e.text for e in events if isinstance(e, TextDelta)),
                    "".join(e.text for e in events if isinstance(e, ReasoningDelta)),
                    [(c["name"], c["arguments"]) for c in p.calls]))
    assert out[0] == out[1]
    return out[0]


def test_a_recipient_the_prompt_began_is_not_answer_text():
    """Functionary v3.2's prompt ends with ``>>>``: the model names the recipient, ``all`` for its
    answer, a function for a call; the prompt's ``>>>`` never reaches the answer, even where the
    model names none."""
    functionary = _contract("meetkai-functionary-medium-v3.2")
    assert functionary.prompt_tail == ">>>"
    assert _whole_and_streamed(functionary, "all\nLet me look.>>>get_weather\n{\"city\": \"Paris\"}") == (
        "Let me look.", "", [("get_weather", '{"city": "Paris"}')])
    assert _whole_and_streamed(functionary, "Hello there") == ("Hello there", "", [])
    assert _whole_and_streamed(functionary, "Hello there\n{}") == ("Hello there\n{}", "", [])


def test_messages_addressed_to_recipients():
    """Muse Glimmer: ``to=self`` thinks, ``to=user`` answers, ``to=NAME`` calls; ``to=`` inside
    the answer's text is text."""
    muse = _contract("muse-glimmer")
    reply = (' to=self<|message|>Think.<|eom|><|start|>assistant to=user<|message|>Set x to=5 now<|eom|>'
             '<|start|>assistant to=get_weather<|message|><atem:function_calls>\n<atem:invoke name="get_weather">\n'
             '<atem:parameter name="city">Paris</atem:parameter>\n</atem:invoke>\n</atem:function_calls>')
    assert _whole_and_streamed(muse, reply) == ("Set x to=5 now", "Think.", [("get_weather", '{"city": "Paris"}')])


def test_thinking_markers_a_template_asks_for_in_words():
    """Granite 3.3 asks for ``<think></think>`` and ``<response></response>`` in its system prompt."""
    granite = _contract("ibm-granite-granite-3.3-2B-Instruct")
    assert _whole_and_streamed(granite, "<think>Hmm.</think><response>Hi!</response>", tools=None) == ("Hi!", "Hmm.", [])


def test_inline_thinking_keeps_its_opening_where_it_closes():
    """Reasoning format "none" with the thinking opened by the prompt: a block that closes is
    shown with the prompt's opening; one a call ends is answer text without it."""
    ling = _contract("inclusionai-ling-3.0-flash")
    call = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"
    assert _whole_and_streamed(ling, "Hmm.\n</think>\nSure." + call, in_reasoning=True, inline=True) == (
        "<think>Hmm.\n</think>\nSure.", "", [("get_weather", '{"city": "Paris"}')])
    assert _whole_and_streamed(ling, "Hmm.\n" + call, in_reasoning=True, inline=True) == (
        "Hmm.\n", "", [("get_weather", '{"city": "Paris"}')])
