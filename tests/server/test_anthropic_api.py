"""Anthropic Messages through the official ``anthropic`` SDK, against a live server."""

from __future__ import annotations

import json

import anthropic
import httpx
import jsonschema
import pytest

GREEDY = {"temperature": 0}  # the SDK dropped sampling arguments: they go in the body as extras
QUESTION = [{"role": "user", "content": "Name three colors."}]


@pytest.fixture()
def client(server):
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=120)


def test_create_and_stream_agree(client):
    full = client.messages.create(model="smollm2-135m", max_tokens=12, messages=QUESTION, extra_body=GREEDY)
    assert full.type == "message" and full.role == "assistant" and full.id.startswith("msg_")
    assert full.content[0].type == "text" and full.content[0].text
    assert full.stop_reason in ("end_turn", "max_tokens") and full.stop_sequence is None
    assert full.usage.output_tokens <= 12
    assert full.usage.input_tokens + full.usage.cache_read_input_tokens > 10
    events = []
    with client.messages.stream(model="smollm2-135m", max_tokens=12, messages=QUESTION, extra_body=GREEDY) as s:
        for ev in s:
            events.append(ev.type)
        final = s.get_final_message()
    assert events[0] == "message_start" and events[-1] == "message_stop"
    assert {"content_block_start", "content_block_delta", "content_block_stop", "message_delta", "text"} <= set(events)
    assert final.content[0].text == full.content[0].text
    assert final.stop_reason == full.stop_reason and final.usage.output_tokens == full.usage.output_tokens


def test_max_tokens_and_stop_sequences(client):
    cut = client.messages.create(model="smollm2-135m", max_tokens=3, messages=[
        {"role": "user", "content": "Tell me a long story about a dragon."}], extra_body=GREEDY)
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 3
    counting = [{"role": "user", "content": "Count from 1 to 10, separated by commas."}]
    free = client.messages.create(model="smollm2-135m", max_tokens=12, messages=counting, extra_body=GREEDY)
    assert "4" in free.content[0].text
    stopped = client.messages.create(model="smollm2-135m", max_tokens=12, messages=counting, stop_sequences=["4"],
                                     extra_body=GREEDY)
    assert stopped.stop_reason == "stop_sequence" and stopped.stop_sequence == "4"
    assert "4" not in stopped.content[0].text and free.content[0].text.startswith(stopped.content[0].text)


def test_system_blocks_and_text_blocks(client):
    as_string = client.messages.create(model="smollm2-135m", max_tokens=8, system="You answer in French.",
                                       messages=QUESTION, extra_body=GREEDY)
    as_blocks = client.messages.create(
        model="smollm2-135m", max_tokens=8, system=[{"type": "text", "text": "You answer in French."}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "Name three colors."}]}], extra_body=GREEDY)
    assert as_blocks.content[0].text == as_string.content[0].text


def test_count_tokens_matches_the_prompt(client):
    counted = client.messages.count_tokens(model="smollm2-135m", messages=QUESTION)
    system = "You are a careful assistant who answers every question in one short, plain sentence. " * 3
    longer = client.messages.count_tokens(model="smollm2-135m", system=system, messages=QUESTION)
    assert longer.input_tokens > counted.input_tokens > 5
    made = client.messages.create(model="smollm2-135m", max_tokens=2, messages=QUESTION, extra_body=GREEDY)
    assert made.usage.input_tokens + made.usage.cache_read_input_tokens == counted.input_tokens


def test_repeated_long_prompt_is_read_from_the_prefix_cache(client):
    text = " ".join(f"Fact {i}: the number {i} is {'even' if i % 2 == 0 else 'odd'}." for i in range(40))
    messages = [{"role": "user", "content": text + " Which facts are about even numbers?"}]
    client.messages.create(model="smollm2-135m", max_tokens=2, messages=messages, extra_body=GREEDY)
    again = client.messages.create(model="smollm2-135m", max_tokens=2, messages=messages, extra_body=GREEDY)
    total = again.usage.input_tokens + again.usage.cache_read_input_tokens
    assert total > 300 and again.usage.cache_read_input_tokens >= total - 32  # all but the last blocks


def test_missing_max_tokens_is_anthropics_error(server):
    c = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=60)
    with pytest.raises(anthropic.BadRequestError) as e:
        c.messages.create(model="smollm2-135m", messages=QUESTION, max_tokens=None)
    assert e.value.status_code == 400
    assert e.value.body == {"type": "error", "error": {"type": "invalid_request_error",
                                                       "message": "max_tokens: Field required"}}


@pytest.mark.parametrize("extra, status, needle", [
    ({"tools": [{"name": "weather", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool", "name": "x"}},
     400, "not in 'tools'"),
    ({"tools": [{"name": "weather", "input_schema": {"type": "nonsense"}}]}, 400, "not a valid JSON schema"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, 400, "base64 image sources"),
    ({"model": "no-such-model"}, 404, "no-such-model"),
    ({"temperature": 1.5}, 400, "temperature"),
    ({"messages": [{"role": "bot", "content": "hi"}]}, 400, "messages.0.role"),
    ({"output_config": {"format": {"type": "json_schema"}}}, 400, "output_config.format"),
])
def test_bad_input_gets_anthropic_errors(server, extra, status, needle):
    body = {"model": "smollm2-135m", "max_tokens": 4, "messages": QUESTION, **extra}
    r = httpx.post(f"{server.url}/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"})
    assert r.status_code == status, r.text
    err = r.json()
    assert err["type"] == "error" and needle in err["error"]["message"]
    assert err["error"]["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
    assert server.health()["engine"]["state"] == "running"


def test_raw_stream_names_every_event(server):
    body = {"model": "smollm2-135m", "max_tokens": 4, "stream": True, "messages": QUESTION}
    with httpx.stream("POST", f"{server.url}/v1/messages", json=body) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        names = [line.split(": ", 1)[1] for line in r.iter_lines() if line.startswith("event: ")]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    names = names[:3] + [n for n in names[3:] if n != "ping"]  # a ping more is a keep-alive (5 s of silence)
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[3:-3]) == {"content_block_delta"}


WEATHER = {"name": "get_weather", "description": "The current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                            "required": ["city"], "additionalProperties": False}}
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
FORCED = {"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "get_weather"}}


def _tool_use(message):
    uses = [b for b in message.content if b.type == "tool_use"]
    assert message.stop_reason == "tool_use" and len(uses) == 1
    use = uses[0]
    assert use.name == "get_weather" and use.id.startswith("toolu_")
    jsonschema.validate(use.input, WEATHER["input_schema"])
    return use


def test_forced_tool_use_whole_and_streamed(client):
    kw = dict(model="smollm2-135m", max_tokens=60, messages=ASK_WEATHER, extra_body=GREEDY, **FORCED)
    whole = _tool_use(client.messages.create(**kw))
    with client.messages.stream(**kw) as s:
        kinds = [ev.type for ev in s]
        final = s.get_final_message()
    streamed = _tool_use(final)
    assert "input_json" in kinds and kinds[-1] == "message_stop"
    assert streamed.input == whole.input  # greedy: the same call both ways


def test_tool_result_round_trip(client):
    kw = dict(model="smollm2-135m", max_tokens=60, extra_body=GREEDY)
    first = client.messages.create(messages=ASK_WEATHER, **FORCED, **kw)
    use = _tool_use(first)
    history = ASK_WEATHER + [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "Sunny, 18 C"}]}]
    answer = client.messages.create(messages=history, tools=[WEATHER], tool_choice={"type": "none"}, **kw)
    assert answer.stop_reason in ("end_turn", "max_tokens")
    assert [b.type for b in answer.content] == ["text"] and answer.content[0].text
    # the result is in the prompt: it is longer than the same history without it
    shorter = client.messages.count_tokens(model="smollm2-135m", messages=history[:2] + [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": ""}]}])
    longer = client.messages.count_tokens(model="smollm2-135m", messages=history)
    assert longer.input_tokens > shorter.input_tokens


def test_raw_tool_use_stream_events(server):
    body = {"model": "smollm2-135m", "max_tokens": 60, "stream": True, "messages": ASK_WEATHER, "temperature": 0,
            **FORCED}
    with httpx.stream("POST", f"{server.url}/v1/messages", json=body, timeout=120) as r:  # a tool call streams once whole
        data = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    kinds = [d["type"] for d in data]
    assert kinds[:2] == ["message_start", "ping"] and kinds[-2:] == ["message_delta", "message_stop"]
    start = next(d for d in data if d["type"] == "content_block_start")
    assert start["content_block"]["type"] == "tool_use" and start["content_block"]["input"] == {}
    i = start["index"]
    parts = [d["delta"]["partial_json"] for d in data if d["type"] == "content_block_delta" and d["index"] == i]
    jsonschema.validate(json.loads("".join(parts)), WEATHER["input_schema"])
    assert kinds.index("content_block_stop") > kinds.index("content_block_delta")
    assert data[-2]["delta"]["stop_reason"] == "tool_use"


def test_structured_output_from_output_config(client):
    schema = {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}},
              "required": ["color"], "additionalProperties": False}
    r = client.messages.create(model="smollm2-135m", max_tokens=30, messages=QUESTION, extra_body={
        **GREEDY, "output_config": {"format": {"type": "json_schema", "schema": schema}}})
    jsonschema.validate(json.loads(r.content[0].text), schema)
