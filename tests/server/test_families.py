"""Forced tool calls end to end, family by family, on real tokenizers and real templates.

Each family is a tiny model (``tests/family_models.py``): the tokenizer llama.cpp ships for the
family's vocabulary, the family's chat template from ``tests/chat/templates``, random weights.
A real ``hearth serve`` loads it and derives its output contract from the template (checked:
the calls' body kind and one of the family's markers), and is asked for a forced call through
the four wire formats: OpenAI chat completions (``required`` and a named function, whole and
streamed), Anthropic Messages (``any`` and a named tool), the Responses API (``required``) and
Ollama's ``/api/chat`` (Ollama's API has no ``tool_choice``; Hearth takes one from the body or
``options``). The call grammar writes each call in the
family's own markup and the parser must read it back: a structured call with the tool's name,
arguments that are JSON and match the tool's schema (the weights are random, so the values
are random text: types and bounds are checked, not values), and no markup left in the text.

The tool's string has a ``maxLength`` and its integer a range, as a real tool's often do: a
random model never ends a free string on its own, the bounds make every call end.

Ollama's request is sent as JSON rather than through the ``ollama`` client, whose ``Tool``
model drops ``maxLength`` and ``minimum`` from the schema before it is sent.

About 3 minutes on 2 busy cores: each family's service starts in 4-10 s, its first forced call
builds the grammar's view of a 100k-262k vocabulary (1-5 s), later calls take about a second.
The services decode with one thread: two threads on a busy 2-core machine spin against each
other (200 ms a token instead of 16 ms). The vocabularies come from llama-cpp-python's sdist,
downloaded once (``tests/llama_sources.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import httpx
import jsonschema
import pytest

from runtime.server.launcher import ServiceProcess
from tests.family_models import write_family_model

TEMPLATES = Path(__file__).parent.parent / "chat" / "templates"


@dataclass(frozen=True)
class Family:
    name: str
    template: str  #: the stem of a file in tests/chat/templates
    vocab: str  #: llama.cpp's ggml-vocab-VOCAB.gguf
    #: the body kind of the calls derived from the template (None: it renders none) and a marker
    #: of the family's that the derived syntax holds
    body: str | None
    marker: str = ""
    arch: str = "llama"


FAMILIES = [
    Family("qwen3-coder", "Qwen3-Coder", "qwen35", "tagged", "<function=", "qwen2"),
    Family("qwen2.5", "Qwen-Qwen2.5-7B-Instruct", "qwen2", "json", "<tool_call>", "qwen2"),  # Hermes' format
    Family("llama-3.1", "meta-llama-Llama-3.1-8B-Instruct", "llama-bpe", "json", "parameters"),  # bare JSON
    Family("mistral-nemo", "mistralai-Mistral-Nemo-Instruct-2407", "llama-spm", "json", "[TOOL_CALLS]"),
    Family("mistral-small-3.2", "Mistral-Small-3.2-24B-Instruct-2506", "llama-spm", "name_json", "[CALL_ID]"),
    Family("deepseek-v3.1", "deepseek-ai-DeepSeek-V3.1", "deepseek-llm", "name_json", "<｜tool▁call▁begin｜>"),
    Family("glm-4.7", "GLM-4.7-Flash", "qwen2", "tagged", "<arg_key>", "qwen2"),
    Family("gpt-oss", "openai-gpt-oss-120b", "llama-bpe", "name_json", "to=functions."),  # harmony channels
    Family("gemma-4", "google-gemma-4-31B-it", "gemma-4", "tagged", '<|"|>'),
    Family("command-r7b", "CohereForAI-c4ai-command-r7b-12-2024-tool_use", "command-r", "json", "<|START_ACTION|>"),
    Family("phi-3.5", "microsoft-Phi-3.5-mini-instruct", "phi-3", None),  # tools described, calls in JSON
]

WEATHER_PARAMS = {"type": "object", "properties": {
    "city": {"type": "string", "description": "The city", "maxLength": 20},
    "days": {"type": "integer", "description": "Days ahead", "minimum": 1, "maximum": 14}},
    "required": ["city", "days"], "additionalProperties": False}
NOTE_PARAMS = {"type": "object", "properties": {"text": {"type": "string", "maxLength": 20}},
               "required": ["text"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather forecast",
                                            "parameters": WEATHER_PARAMS}}
NOTE = {"type": "function", "function": {"name": "take_note", "description": "Write a note", "parameters": NOTE_PARAMS}}
SCHEMAS = {"get_weather": WEATHER_PARAMS, "take_note": NOTE_PARAMS}
ASK = [{"role": "user", "content": "What will the weather be in Paris for the next 3 days?"}]
#: a call is 20-60 tokens (a string of at most 20 characters); up to four calls when parallel
MAX_TOKENS = 400


@pytest.fixture(scope="module", params=FAMILIES, ids=lambda f: f.name)
def family(request, tmp_path_factory):
    f: Family = request.param
    d = tmp_path_factory.mktemp(f.name)
    path = write_family_model(d / f"{f.name}.gguf", f.vocab, (TEMPLATES / f"{f.template}.jinja").read_text(),
                              arch=f.arch)
    s = ServiceProcess("--model", str(path), "--models-dir", str(d), "--ctx", "4096", "--parallel", "1",
                       "--threads", "1").wait_ready()
    s.model, s.family = str(path), f
    yield s
    s.stop()


def _valid(name: str, arguments: str | dict) -> dict:
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    assert isinstance(args, dict), arguments
    jsonschema.validate(args, SCHEMAS[name])
    return args


def _openai(server):
    from openai import OpenAI

    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


def test_the_contract_is_the_familys(family):
    """The calls are derived from the template in the family's own syntax (a fallback to the
    described JSON would pass the tests below too)."""
    r = httpx.get(f"{family.url}/hearth/models/{family.model}/template", timeout=30)
    assert r.status_code == 200, r.text
    calls = r.json()["contract"]["calls"]
    if family.family.body is None:
        assert calls is None, calls
        return
    assert calls["body"] == family.family.body, calls
    assert any(family.family.marker in v for v in calls.values() if isinstance(v, str)), calls


def test_openai_chat_completions(family):
    oai = _openai(family)
    kw = dict(model=family.model, messages=ASK, tools=[WEATHER], tool_choice="required", temperature=0,
              max_tokens=MAX_TOKENS)
    whole = oai.chat.completions.create(**kw).choices[0]
    assert whole.finish_reason == "tool_calls", whole
    assert not whole.message.content, whole.message.content
    calls = [(c.function.name, _valid(c.function.name, c.function.arguments)) for c in whole.message.tool_calls]
    assert calls and all(name == "get_weather" for name, _ in calls), calls
    assert len({c.id for c in whole.message.tool_calls}) == len(calls)

    # streamed: the same calls (greedy), assembled from deltas, and no text at all
    content, streamed, finish = "", {}, None
    for chunk in oai.chat.completions.create(**kw, stream=True):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        finish = choice.finish_reason or finish
        for tc in choice.delta.tool_calls or []:
            got = streamed.setdefault(tc.index, {"name": "", "arguments": ""})
            if tc.function:
                got["name"] += tc.function.name or ""
                got["arguments"] += tc.function.arguments or ""
    assert finish == "tool_calls" and content == "", (finish, content)
    assert [(c["name"], json.loads(c["arguments"])) for _, c in sorted(streamed.items())] == calls

    # a named function among two: exactly that one, once
    named = oai.chat.completions.create(**{**kw, "tools": [NOTE, WEATHER],
                                           "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
    c = named.choices[0]
    assert c.finish_reason == "tool_calls" and not c.message.content, c
    assert [t.function.name for t in c.message.tool_calls] == ["get_weather"]
    _valid("get_weather", c.message.tool_calls[0].function.arguments)


def test_anthropic_messages(family):
    import anthropic

    claude = anthropic.Anthropic(base_url=family.url, api_key="unused", max_retries=0, timeout=120)
    tools = [{"name": t["function"]["name"], "description": t["function"]["description"],
              "input_schema": t["function"]["parameters"]} for t in (NOTE, WEATHER)]
    r = claude.messages.create(model=family.model, max_tokens=MAX_TOKENS, messages=ASK, tools=tools[1:],
                               tool_choice={"type": "any"}, extra_body={"temperature": 0})
    assert r.stop_reason == "tool_use", r
    uses = [b for b in r.content if b.type == "tool_use"]
    assert uses and all(u.name == "get_weather" for u in uses), r.content
    for u in uses:
        _valid(u.name, u.input)
    assert not "".join(b.text for b in r.content if b.type == "text"), r.content

    with claude.messages.stream(model=family.model, max_tokens=MAX_TOKENS, messages=ASK, tools=tools, extra_body={"temperature": 0},
                                tool_choice={"type": "tool", "name": "get_weather"}) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use", final
    assert [b.type for b in final.content] == ["tool_use"], final.content
    assert final.content[0].name == "get_weather"
    _valid("get_weather", final.content[0].input)


def test_responses_api(family):
    oai = _openai(family)
    tool = {"type": "function", **WEATHER["function"]}
    r = oai.responses.create(model=family.model, input=ASK[0]["content"], tools=[tool], tool_choice="required",
                             temperature=0, max_output_tokens=MAX_TOKENS)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and all(c.name == "get_weather" for c in calls), r.output
    for c in calls:
        _valid(c.name, c.arguments)
    assert r.output_text == "", r.output_text
    assert all(o.type in ("function_call", "reasoning") for o in r.output), r.output


def test_ollama_chat(family):
    """Ollama's API has no tool_choice: Hearth reads one from the body or ``options``."""
    for choice in ("required", "get_weather"):
        r = httpx.post(f"{family.url}/api/chat", timeout=120, json={
            "model": family.model, "messages": ASK, "tools": [NOTE, WEATHER], "stream": False,
            "options": {"temperature": 0, "num_predict": MAX_TOKENS, "tool_choice": choice}})
        assert r.status_code == 200, r.text
        msg = r.json()["message"]
        calls = msg.get("tool_calls") or []
        assert calls and msg["content"] == "", msg
        for call in calls:
            _valid(call["function"]["name"], call["function"]["arguments"])
        if choice == "get_weather":
            assert [c["function"]["name"] for c in calls] == ["get_weather"]
