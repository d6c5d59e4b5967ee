"""OpenAI Responses through the official ``openai`` client, and one prompt through all four wire
formats, against a live server that also listens on an Ollama port."""

from __future__ import annotations

import json
import socket
import subprocess

import anthropic
import httpx
import jsonschema
import ollama
import openai
import pytest

from runtime.server.launcher import ServiceProcess, free_port
from runtime.self_command import hearth_argv

QUESTION = "Name three colors."


@pytest.fixture(scope="module")
def server(smollm2_path):
    s = ServiceProcess("--parallel", "2", "--ctx", "4096", "--ollama-port", str(free_port())).wait_ready()
    s.ollama_port = int(s.proc.args[s.proc.args.index("--ollama-port") + 1])
    yield s
    s.stop()


def _without_keepalives(kinds: list[str]) -> list[str]:
    """The event types, without the repeated ``response.in_progress`` the service sends as a
    keep-alive when a stream has been silent for 5 s (a loaded machine reading the prompt)."""
    first = kinds.index("response.in_progress") if "response.in_progress" in kinds else len(kinds)
    return kinds[:first + 1] + [k for k in kinds[first + 1:] if k != "response.in_progress"]


@pytest.fixture()
def oai(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


def test_create_stream_and_output_text(oai):
    r = oai.responses.create(model="smollm2-135m", input=QUESTION, max_output_tokens=12, temperature=0)
    assert r.object == "response" and r.id.startswith("resp_") and r.output_text
    assert r.status in ("completed", "incomplete") and r.output[0].role == "assistant"
    assert r.usage.input_tokens > 10 and 0 < r.usage.output_tokens <= 12
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    events = list(oai.responses.create(model="smollm2-135m", input=QUESTION, max_output_tokens=12, temperature=0,
                                       stream=True))
    kinds = _without_keepalives([e.type for e in events])
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed" if r.status == "completed" else "response.incomplete"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == r.output_text
    assert events[-1].response.output_text == r.output_text


def test_max_output_tokens_makes_an_incomplete_response(oai):
    r = oai.responses.create(model="smollm2-135m", input="Tell me a long story about a dragon.",
                             max_output_tokens=3, temperature=0)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3


def test_items_instructions_and_developer_role(oai):
    plain = oai.responses.create(model="smollm2-135m", instructions="You answer in French.", input=QUESTION,
                                 max_output_tokens=8, temperature=0)
    items = oai.responses.create(model="smollm2-135m", max_output_tokens=8, temperature=0, input=[
        {"role": "system", "content": "You answer in French."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": QUESTION}]}])
    assert items.output_text == plain.output_text
    assert oai.responses.create(model="smollm2-135m", input=[{"role": "developer", "content": "Be brief."},
                                                             {"role": "user", "content": "Hi"}],
                                max_output_tokens=2, reasoning={"effort": "low"}).usage.output_tokens <= 2


def test_previous_response_id_continues_from_the_cache(oai):
    first = oai.responses.create(model="smollm2-135m", instructions="You are terse.", max_output_tokens=8,
                                 input="My name is Ada. " * 10 + "Say hello.", temperature=0)
    second = oai.responses.create(model="smollm2-135m", instructions="You are terse.", max_output_tokens=8,
                                  input="What is my name?", previous_response_id=first.id, temperature=0)
    assert second.previous_response_id == first.id
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens - 16
    assert oai.responses.retrieve(first.id).output_text == first.output_text
    oai.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError) as e:
        oai.responses.create(model="smollm2-135m", input="Again?", previous_response_id=first.id)
    assert e.value.body["param"] == "previous_response_id"


def test_unstored_responses_cannot_be_continued(oai):
    r = oai.responses.create(model="smollm2-135m", input="Hi", max_output_tokens=2, store=False)
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(r.id)


@pytest.mark.parametrize("extra, needle", [
    ({"tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}}],
      "tool_choice": {"type": "function", "name": "other"}}, "not in 'tools'"),
    ({"text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "nonsense"}}}}, "not a valid JSON schema"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "data URL"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"temperature": "warm"}, "temperature"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "item_reference"),
])
def test_bad_input_gets_openai_errors(server, extra, needle):
    r = httpx.post(f"{server.url}/v1/responses", json={"model": "smollm2-135m", "input": "Hi", **extra})
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]


def test_one_prompt_four_wire_formats_same_greedy_text(server, oai):
    n = 10
    chat = oai.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": QUESTION}],
                                       max_tokens=n, temperature=0).choices[0].message.content
    responses = oai.responses.create(model="smollm2-135m", input=QUESTION, max_output_tokens=n,
                                     temperature=0).output_text
    claude = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=120)
    messages = claude.messages.create(model="smollm2-135m", max_tokens=n, messages=[
        {"role": "user", "content": QUESTION}], extra_body={"temperature": 0}).content[0].text
    on_ollama_port = ollama.Client(host=f"http://127.0.0.1:{server.ollama_port}", timeout=120)
    ollama_text = on_ollama_port.chat(model="smollm2-135m", messages=[{"role": "user", "content": QUESTION}],
                                      options={"temperature": 0, "num_predict": n}).message.content
    assert chat and chat == responses == messages == ollama_text


def test_ollama_port_serves_tags(server):
    tags = httpx.get(f"http://127.0.0.1:{server.ollama_port}/api/tags").json()
    assert "smollm2-135m:latest" in {m["model"] for m in tags["models"]}


def test_a_taken_ollama_port_is_refused_at_start(smollm2_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([*hearth_argv(), "serve", "--port", str(free_port()), "--ollama-port", str(port)],
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert f"127.0.0.1:{port} for --ollama-port" in proc.stderr and "Is Ollama" in proc.stderr


WEATHER = {"type": "function", "name": "get_weather", "description": "The current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                          "required": ["city"], "additionalProperties": False}}
FORCED = {"tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"}}


def _call(response):
    calls = [i for i in response.output if i.type == "function_call"]
    assert response.status == "completed" and len(calls) == 1
    call = calls[0]
    assert call.name == "get_weather" and call.call_id.startswith("call_") and call.id.startswith("fc_")
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    return call


def test_forced_function_call_whole_and_streamed(oai):
    kw = dict(model="smollm2-135m", input="What is the weather in Paris?", max_output_tokens=60, temperature=0,
              **FORCED)
    whole = _call(oai.responses.create(**kw))
    kinds, args = [], []
    for ev in oai.responses.create(stream=True, **kw):
        kinds.append(ev.type)
        if ev.type == "response.function_call_arguments.delta":
            args.append(ev.delta)
        elif ev.type == "response.completed":
            final = ev.response
    streamed = _call(final)
    kinds = _without_keepalives(kinds)
    assert kinds[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert kinds[-3:] == ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert "".join(args) == streamed.arguments == whole.arguments  # greedy: the same call both ways


def test_function_call_output_round_trip(oai):
    first = oai.responses.create(model="smollm2-135m", input="What is the weather in Paris?", max_output_tokens=60,
                                 temperature=0, **FORCED)
    call = _call(first)
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 18 C"}
    # stateless: the call and its result sent back as input items
    items = [{"role": "user", "content": "What is the weather in Paris?"},
             {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments}, result]
    answer = oai.responses.create(model="smollm2-135m", input=items, tools=[WEATHER], tool_choice="none",
                                  max_output_tokens=12, temperature=0)
    assert answer.output_text and not [i for i in answer.output if i.type == "function_call"]
    # stateful: the stored call continues from previous_response_id with only the result
    chained = oai.responses.create(model="smollm2-135m", previous_response_id=first.id, input=[result],
                                   tools=[WEATHER], tool_choice="none", max_output_tokens=12, temperature=0)
    assert chained.output_text == answer.output_text
    assert chained.usage.input_tokens_details.cached_tokens > 0


def test_text_format_json_schema(oai):
    schema = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}},
              "required": ["color"], "additionalProperties": False}
    r = oai.responses.create(model="smollm2-135m", input=QUESTION, max_output_tokens=30, temperature=0,
                             text={"format": {"type": "json_schema", "name": "color", "schema": schema}})
    jsonschema.validate(json.loads(r.output_text), schema)
    assert r.text.format.type == "json_schema"
