"""Every chat template of llama.cpp's test set renders through ChatRenderer, and nothing in a
conversation is lost on the way: what a template renders is checked in its output, what it
cannot render is refused with ChatTemplateError, and what it can render is what llama.cpp's
capability probe says (``common/jinja/caps.cpp``)."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

from runtime.chat.renderer import ChatRenderer, ChatTemplateError
from runtime.chat.template_caps import TemplateCaps

TEMPLATES = Path(__file__).parent / "templates"
NAMES = sorted(p.stem for p in TEMPLATES.glob("*.jinja"))
ROOT = Path(__file__).resolve().parents[2]

#: What llama.cpp's ``caps_get`` says each template lacks (``+typed``: it also reads typed
#: content parts), computed with llama.cpp's own Jinja engine as vendored by llama-cpp-python
#: 0.3.36. Templates not listed support the system role, tools, tool calls, parallel calls
#: and object arguments. Every template takes string content.
LLAMA_CPP_LACKS = {
    "Apriel-1.6-15b-Thinker-fixed": "+typed",
    "Cohere2MoE": "+typed",
    "GLM-4.6": "+typed",
    "GLM-4.7-Flash": "+typed",
    "GigaChat3-10B-A1.8B": "parallel_tool_calls",
    "GigaChat3.1-10B-A1.8B": "parallel_tool_calls",
    "HuggingFaceTB-SmolLM3-3B": "tools tool_calls parallel_tool_calls object_arguments",
    "Kimi-K2-Instruct": "+typed",
    "Kimi-K2-Thinking": "+typed",
    "Kimi-K3": "+typed",
    "LFM2-8B-A1B": "tool_calls parallel_tool_calls object_arguments",
    "LFM2.5-Instruct": "tool_calls parallel_tool_calls object_arguments",
    "MiniMax-M1": "+typed",
    "MiniMax-M2": "+typed",
    "MiniMax-M3": "+typed",
    "Mistral-Small-3.2-24B-Instruct-2506": "+typed",
    "Qwen3.5-4B": "+typed",
    "Reka-Edge": "+typed",
    "Spark2.5": "+typed",
    "StepFun3.5-Flash": "+typed",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": "tools tool_calls parallel_tool_calls object_arguments",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "tools",
    "deepseek-ai-DeepSeek-V3.1": "tools",
    # llama.cpp no longer gives this template the ``functions`` text it reads; Hearth does
    # (as llama.cpp's earlier Firefunction handler did), so here it describes tools
    "fireworks-ai-llama-3-firefunction-v2": "",
    "google-gemma-2-2b-it": "system_role tools tool_calls parallel_tool_calls object_arguments",
    "google-gemma-4-31B-it-interleaved": "+typed",
    "google-gemma-4-31B-it": "+typed",
    "ibm-granite-granite-3.3-2B-Instruct": "tool_calls parallel_tool_calls object_arguments",
    "ibm-granite-granite-4.0": "+typed",
    "ibm-granite-granite-4.1": "+typed",
    "llama-cpp-rwkv-world": "tools tool_calls parallel_tool_calls object_arguments",
    "meetkai-functionary-medium-v3.2": "object_arguments",
    "meta-llama-Llama-3.1-8B-Instruct": "parallel_tool_calls",
    "meta-llama-Llama-3.2-3B-Instruct": "parallel_tool_calls",
    "meta-llama-Llama-3.3-70B-Instruct": "parallel_tool_calls",
    "microsoft-Phi-3.5-mini-instruct": "tools tool_calls parallel_tool_calls object_arguments",
    "moonshotai-Kimi-K2": "+typed",
    "muse-glimmer": "+typed",
    "openai-gpt-oss-120b": "parallel_tool_calls",
    "tencent-Hy3": "+typed",
    "unsloth-Apriel-1.5": "+typed",
    "unsloth-mistral-Devstral-Small-2507": "+typed",
}

SYSTEM = "You answer about the weather, SYS-7341."
USER1 = "What is the weather in Paris? U-1"
USER2 = "Thanks! And what time is it there? U-2"
ANSWER = "It is mild today. A-1"
CITY = "Paris-1789"
RESULT = "18 degrees and sunny R-4411"
CALL_ID = "call_5f0c2a9e8b7d4c3a1f6e2d9b"  # Hearth's own shape: call_ and 24 hex digits

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city now",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_local_time", "description": "The local time in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                       "format": {"type": "string", "enum": ["12h", "24h"]}},
                       "required": ["city"]}}},
]

PLAIN = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER1},
         {"role": "assistant", "content": ANSWER}, {"role": "user", "content": USER2}]

CALL = {"role": "assistant", "content": "",
        "tool_calls": [{"id": CALL_ID, "type": "function", "function": {"name": "get_weather",
                                                                         "arguments": {"city": CITY}}}]}
RESULT_MESSAGE = {"role": "tool", "tool_call_id": CALL_ID, "name": "get_weather", "content": RESULT}
WITH_TOOLS = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER1}, CALL, RESULT_MESSAGE,
              {"role": "user", "content": USER2}]

NOW = datetime(2024, 7, 26, 9, 30)


@functools.cache
def renderer(name: str) -> ChatRenderer:
    return ChatRenderer((TEMPLATES / f"{name}.jinja").read_text(), bos="<BOS>", eos="<EOS>")


def lacks(name: str) -> set[str]:
    return set(LLAMA_CPP_LACKS.get(name, "").split())


def test_the_seventy_templates_are_here():
    assert len(NAMES) == 70


@pytest.mark.parametrize("name", NAMES)
def test_caps_are_llama_cpps(name):
    caps = renderer(name).caps
    missing = lacks(name)
    assert caps.supports_system_role == ("system_role" not in missing)
    assert caps.supports_tools == ("tools" not in missing)
    assert caps.supports_tool_calls == ("tool_calls" not in missing)
    assert caps.supports_parallel_tool_calls == ("parallel_tool_calls" not in missing)
    assert caps.requires_object_arguments == ("object_arguments" not in missing)
    assert caps.supports_typed_content == ("+typed" in missing)
    assert not caps.requires_typed_content


@pytest.mark.parametrize("name", NAMES)
def test_a_plain_conversation_keeps_every_turn(name):
    r = renderer(name)
    out = r.render(PLAIN, now=NOW)
    for text in (SYSTEM, USER1, ANSWER, USER2):
        assert text in out, text
    assert_generation_prompt_at_the_end(r, PLAIN, {})


def assert_generation_prompt_at_the_end(r: ChatRenderer, messages: list[dict], kwargs: dict) -> None:
    """add_generation_prompt changes the prompt after the last user turn, and nothing before;
    a template that never reads it (Mistral's, Command R7B's: they always end with the model's
    turn open) renders the same."""
    out = r.render(messages, now=NOW, **kwargs)
    without = r.render(messages, add_generation_prompt=False, now=NOW, **kwargs)
    if "add_generation_prompt" not in r.source:
        assert out == without
        return
    first_difference = next((i for i, (a, b) in enumerate(zip(out, without)) if a != b), min(len(out), len(without)))
    assert out != without and first_difference > out.rindex(USER2)


WITHOUT_TOOL_SUPPORT = [n for n in NAMES if {"tools", "tool_calls"} & lacks(n)]


@pytest.mark.parametrize("name", [n for n in NAMES if n not in WITHOUT_TOOL_SUPPORT])
def test_a_tool_call_and_its_result_are_all_in_the_prompt(name):
    r = renderer(name)
    out = r.render(WITH_TOOLS, tools=TOOLS, now=NOW)
    for text in (SYSTEM, USER1, "get_weather", CITY, RESULT, USER2, "get_local_time"):
        assert text in out, text
    assert out.rindex(USER2) > out.index(RESULT) > out.index(CITY) > out.index(USER1)
    assert_generation_prompt_at_the_end(r, WITH_TOOLS, {"tools": TOOLS})


@pytest.mark.parametrize("name", WITHOUT_TOOL_SUPPORT)
def test_what_a_template_cannot_render_is_refused(name):
    """A template without a part of tool support: the conversation with tools is refused (not
    rendered without them), saying what; the parts it does render are in the prompt."""
    r, missing = renderer(name), lacks(name)
    with pytest.raises(ChatTemplateError, match="tool"):
        r.render(WITH_TOOLS, tools=TOOLS, now=NOW)
    history = WITH_TOOLS[:4] + [{"role": "assistant", "content": ANSWER}, WITH_TOOLS[4]]
    if "tools" in missing and "tool_calls" not in missing:  # calls and results, but no tool list
        with pytest.raises(ChatTemplateError, match="does not describe tools"):
            r.render(PLAIN, tools=TOOLS, now=NOW)
        out = r.render(history, now=NOW)
        for text in ("get_weather", CITY, RESULT, USER2):
            assert text in out, text
    if "tool_calls" in missing:
        with pytest.raises(ChatTemplateError, match=r"messages\[2\] has tool calls"):
            r.render(history, now=NOW)
    if "tools" not in missing:  # a tool list, but no calls in the history
        out = r.render(PLAIN, tools=TOOLS, now=NOW)
        assert "get_weather" in out and "get_local_time" in out and SYSTEM in out


@pytest.mark.parametrize("name", ["mistralai-Mistral-Nemo-Instruct-2407", "Mistral-Small-3.2-24B-Instruct-2506",
                                  "mistralai-Ministral-3-14B-Reasoning-2512"])
def test_mistral_templates_get_turns_that_alternate(name):
    """Mistral's templates refuse a user turn right after a tool result, and two user turns in a
    row: the result is followed by an empty assistant turn, the user turns are joined."""
    r = renderer(name)
    assert r.caps.requires_alternating_roles
    out = r.render(WITH_TOOLS, tools=TOOLS, now=NOW)
    # the empty assistant turn is its end alone, before the next user turn (and the tool list)
    assert re.search(r"\[/TOOL_RESULTS\]<EOS>\[(INST|AVAILABLE_TOOLS)\]", out), out
    two = r.render([{"role": "user", "content": "first U-1"}, {"role": "user", "content": "second U-2"}], now=NOW)
    assert "first U-1\n\nsecond U-2" in two


@pytest.mark.parametrize("name", ["mistralai-Mistral-Nemo-Instruct-2407", "Mistral-Small-3.2-24B-Instruct-2506"])
def test_mistral_call_ids_are_nine_characters_and_still_match(name):
    r = renderer(name)
    assert r.caps.requires_nine_char_call_ids
    out = r.render(WITH_TOOLS, tools=TOOLS, now=NOW)
    assert CALL_ID not in out
    ids = [w for w in _words(out) if len(w) == 9 and w.isalnum() and any(c.isdigit() for c in w)]
    assert len(ids) == 2 and ids[0] == ids[1], ids
    assert out == r.render(WITH_TOOLS, tools=TOOLS, now=NOW)  # the same every time (the prefix cache)


def _words(text: str) -> list[str]:
    return re.findall(r"[A-Za-z0-9]+", text)


def test_gemma_2_gets_the_system_message_in_the_first_user_turn():
    r = renderer("google-gemma-2-2b-it")
    out = r.render(PLAIN, now=NOW)
    assert out.startswith(f"<BOS><start_of_turn>user\n{SYSTEM}\n{USER1}<end_of_turn>\n")


def test_functionary_v3_2_gets_the_arguments_as_json_text():
    r = renderer("meetkai-functionary-medium-v3.2")
    assert not r.caps.requires_object_arguments
    out = r.render(WITH_TOOLS, tools=TOOLS, now=NOW)
    assert '>>>get_weather\n{"city": "Paris-1789"}' in out


def test_safe_escapes_nothing():
    """Functionary v3.1 joins ``'...'|safe`` and the tool list: jinja2's Markup would escape it."""
    out = renderer("meetkai-functionary-medium-v3.1").render(WITH_TOOLS, tools=TOOLS, now=NOW)
    assert "Use the function 'get_weather' to 'The weather in a city now'\n{\"name\": \"get_weather\"" in out


def test_kimi_k2_builds_lists_in_the_sandbox():
    out = renderer("moonshotai-Kimi-K2").render(WITH_TOOLS, tools=TOOLS, now=NOW)
    assert "functions.get_weather:0" in out and RESULT in out


def test_qwen3_thinks_unless_told_not_to():
    r = renderer("Qwen-Qwen3-0.6B")
    default = r.render(PLAIN, now=NOW)
    on = r.render(PLAIN, enable_thinking=True, now=NOW)
    off = r.render(PLAIN, enable_thinking=False, now=NOW)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert on == default and on.endswith("<|im_start|>assistant\n") and "</think>" not in on


def test_qwen3_keeps_the_reasoning_of_the_turn_in_progress():
    r = renderer("Qwen-Qwen3-0.6B")
    messages = [{"role": "user", "content": USER1},
                {"role": "assistant", "content": "", "reasoning_content": "I need the weather. R-1",
                 "tool_calls": CALL["tool_calls"]}, RESULT_MESSAGE]
    out = r.render(messages, tools=TOOLS, now=NOW)
    assert "<think>\nI need the weather. R-1\n</think>" in out and RESULT in out


def test_strftime_now_and_the_date_variables_give_the_render_time():
    assert ChatRenderer("{{ strftime_now('%Y-%m-%d %H:%M') }}").render([], now=NOW) == "2024-07-26 09:30"
    assert ChatRenderer("{{ date_string }}|{{ datetime }}").render([], now=NOW) == "26 Jul 2024|Jul 26 2024"
    # Mistral Small 3.2's default system message carries today's date
    out = renderer("Mistral-Small-3.2-24B-Instruct-2506").render([{"role": "user", "content": USER1}], now=NOW)
    assert "The current date is 2024-07-26." in out
    assert "Today Date: 26 Jul 2024" in renderer("meta-llama-Llama-3.1-8B-Instruct").render(PLAIN, now=NOW)


def test_raise_exception_gives_a_chat_template_error():
    with pytest.raises(ChatTemplateError, match="refused the conversation: roles must be named"):
        ChatRenderer("{{ raise_exception('roles must be named') }}").render([{"role": "user", "content": "x"}])
    # a real template's own refusal: Firefunction v2 names the roles it accepts
    with pytest.raises(ChatTemplateError, match="Invalid role narrator"):
        renderer("fireworks-ai-llama-3-firefunction-v2").render([{"role": "narrator", "content": "Once"}])


def test_tojson_takes_the_options_templates_pass():
    r = ChatRenderer("{{ tools | tojson(indent=2, separators=(',', ': '), sort_keys=true) }}"
                     "|{{ 'é<&>' | tojson(ensure_ascii=true) }}|{{ 'é<&>' | tojson }}")
    out = r.render([], tools=[{"b": 1, "a": [1, 2]}])
    assert out == '[\n  {\n    "a": [\n      1,\n      2\n    ],\n    "b": 1\n  }\n]|"\\u00e9<&>"|"é<&>"'


def test_python_string_and_dict_methods_work_and_the_sandbox_holds():
    r = ChatRenderer("{% set ns = namespace(items=[]) %}{% set d = {'k': 'v'} %}{% set _ = d.update({'x': 1}) %}"
                     "{% for m in messages %}{% set _ = ns.items.append(m.content.strip().upper()) %}{% endfor %}"
                     "{{ ns.items | join(',') }}|{{ 'a b'.split() | length }}|{{ d.get('x') }}|{{ d | items | list }}"
                     "|{{ 'x'.__class__ }}|")
    out = r.render([{"role": "user", "content": "  hi  "}, {"role": "user", "content": "there"}])
    assert out == "HI,THERE|2|1|[('k', 'v'), ('x', 1)]||"
    with pytest.raises(ChatTemplateError, match="OverflowError"):  # range is capped: rendering stays bounded
        ChatRenderer("{% for i in range(10000000) %}{% endfor %}").render([])


def test_a_template_cannot_change_the_callers_messages():
    messages = [{"role": "user", "content": "hi"}, CALL]
    tools = [dict(t) for t in TOOLS]
    r = ChatRenderer("{% set _ = messages[0].update({'content': 'changed'}) %}{% set _ = tools.append({'x': 1}) %}"
                     "{% set args = messages[1].tool_calls[0].function.arguments %}"
                     "{% if args is mapping %}{% set _ = args.update({'city': 'Oslo'}) %}{% endif %}"
                     "{{ messages[0].content }} {{ tools | length }} {{ tools[0].function.name }} {{ args | tojson }}")
    assert r.render(messages, tools=tools) == 'changed 3 get_weather {"city": "Oslo"}'
    assert messages[0]["content"] == "hi" and len(tools) == 2
    assert CALL["tool_calls"][0]["function"]["arguments"] == {"city": CITY}


def test_developer_is_system_except_for_gpt_oss():
    developer = [{"role": "developer", "content": "Be brief. D-1"}, {"role": "user", "content": USER1}]
    out = renderer("Qwen-Qwen3-0.6B").render(developer, now=NOW)
    assert out.startswith("<|im_start|>system\nBe brief. D-1<|im_end|>")
    out = renderer("openai-gpt-oss-120b").render(developer, now=NOW)
    assert "<|start|>developer<|message|># Instructions\n\nBe brief. D-1" in out


def test_content_parts_are_joined_or_kept_as_the_template_reads_them():
    parts = [{"role": "user", "content": [{"type": "text", "text": "one P-1"}, {"type": "text", "text": "two P-2"}]}]
    assert "one P-1\ntwo P-2" in renderer("Qwen-Qwen2.5-7B-Instruct").render(parts)  # text only: joined
    assert "one P-1two P-2" in renderer("Qwen3.5-4B").render(parts)  # reads the parts itself
    with pytest.raises(ChatTemplateError, match=r"content\[0\] is a 'image_url' part"):
        renderer("Qwen3.5-4B").render([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])


def test_a_broken_template_is_reported_at_once():
    with pytest.raises(ChatTemplateError, match="not valid Jinja"):
        ChatRenderer("{% for m in messages %}")


def test_caps_is_a_frozen_value():
    caps = renderer("Qwen-Qwen3-0.6B").caps
    assert isinstance(caps, TemplateCaps) and caps is renderer("Qwen-Qwen3-0.6B").caps
    with pytest.raises(AttributeError):
        caps.supports_tools = False  # type: ignore[misc]


def test_the_renderer_loads_neither_llama_cpp_nor_the_service():
    code = ("import sys, runtime.chat.renderer\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('llama_cpp', 'numpy', 'aiohttp')"
            " or m.startswith(('runtime.server', 'runtime.engine'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
