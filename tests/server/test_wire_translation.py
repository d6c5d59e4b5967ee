"""The Anthropic and Responses wire modules translate into the one internal, OpenAI-shaped request:
messages, tool calls and results, tools, tool choice, structured output; the response store's
bounds; the API key as x-api-key; the stop string the engine reports."""

from __future__ import annotations

import json
import os
import time

import pytest

from runtime.config import SecurityConfig, ServeConfig
from runtime.engine.text_stream import TextStream
from runtime.server.wire.anthropic import anthropic_schemas as A
from runtime.server.wire.responses import responses_schemas as R
from runtime.server.app import create_app
from runtime.server.errors import ApiError
from runtime.server.wire.responses.responses_store import ResponseStore


def test_anthropic_blocks_become_openai_messages():
    body = {"max_tokens": 8, "system": [{"type": "text", "text": "Be kind."}, {"type": "text", "text": "Be brief."}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "use the tool", "signature": "s"},
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18C"}]},
                    {"type": "text", "text": "Thanks. And Rome?"}]}],
            "tools": [{"name": "weather", "description": "Weather now", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "thinking": {"type": "enabled", "budget_tokens": 2048}}
    m = A.parse_messages(body)
    assert m.gen.messages == [
        {"role": "system", "content": "Be kind.\nBe brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
        {"role": "user", "content": "Thanks. And Rome?"}]
    assert m.tools == [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"},
                                                         "description": "Weather now"}}]
    assert (m.tool_choice, m.parallel_tool_calls, m.thinking_budget, m.uses_tools) == ("required", False, 2048, True)


@pytest.mark.parametrize("choice, expected", [
    ({"type": "auto"}, "auto"), ({"type": "none"}, "none"), ({"type": "any"}, "required"),
    ({"type": "tool", "name": "f"}, {"type": "function", "function": {"name": "f"}}), (None, None)])
def test_anthropic_tool_choice(choice, expected):
    assert A.translate_tool_choice(choice)[0] == expected


def test_anthropic_error_result_and_structured_output():
    assert A.tool_message({"tool_use_id": "t", "content": "boom", "is_error": True}, "m")["content"] == "Error: boom"
    fmt, effort = A.translate_output_config({"format": {"type": "json_schema", "schema": {"type": "object"}},
                                             "effort": "low"})
    assert fmt == {"type": "json_schema", "json_schema": {"name": "output", "schema": {"type": "object"},
                                                          "strict": True}} and effort == "low"


@pytest.mark.parametrize("body, needle", [
    ({"messages": [{"role": "user", "content": "hi"}]}, "max_tokens: Field required"),
    ({"max_tokens": 4, "messages": []}, "messages: Field required"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure"}]},
     "prefilling"),
    ({"max_tokens": 4, "messages": [{"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "x"}]}]},
     "messages.0.content.0"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "base64 image sources"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], "stop_sequences": 7}, "stop_sequences"),
    ({"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], "thinking": {"type": "on"}}, "thinking.type"),
])
def test_anthropic_bad_bodies_name_the_field(body, needle):
    with pytest.raises(ApiError) as e:
        A.parse_messages(body)
    assert e.value.status == 400 and needle in e.value.message


def test_count_tokens_body_needs_no_max_tokens():
    m = A.parse_messages({"messages": [{"role": "user", "content": "hi"}]}, count_only=True)
    assert m.gen.params.max_tokens is None and not m.uses_tools


def test_responses_items_become_openai_messages():
    r = R.parse_responses({
        "instructions": "Be brief.", "max_output_tokens": 5, "temperature": 0, "store": False,
        "reasoning": {"effort": "high"}, "previous_response_id": "resp_x",
        "input": [
            {"role": "developer", "content": "Use tools."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather "},
                                                            {"type": "input_text", "text": "in Paris?"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": '{"city":"Paris"}'},
            {"type": "function_call", "call_id": "call_2", "name": "time", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "It is 18C."}]}],
        "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}, "strict": True}],
        "tool_choice": {"type": "function", "name": "weather"},
        "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}}})
    assert r.input_messages == [
        {"role": "developer", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "time", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        {"role": "assistant", "content": "It is 18C."}]
    assert r.tools == [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"},
                                                         "strict": True}}]
    assert r.tool_choice == {"type": "function", "function": {"name": "weather"}}
    assert r.response_format == {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}}}
    assert (r.instructions, r.store, r.reasoning_effort, r.previous_response_id) == ("Be brief.", False, "high", "resp_x")
    assert r.gen.params.max_tokens == 5 and r.gen.params.temperature == 0 and r.uses_tools


@pytest.mark.parametrize("body, needle", [
    ({}, "'input'"), ({"input": "hi", "background": True}, "background"),
    ({"input": "hi", "tools": [{"name": "f"}]}, "'tools[0]' must be a tool object"),
    ({"input": "hi", "reasoning": {"effort": "huge"}}, "reasoning.effort"),
    ({"input": "hi", "text": {"format": {"type": "yaml"}}}, "text.format.type"),
    ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
])
def test_responses_bad_bodies_name_the_field(body, needle):
    with pytest.raises(ApiError) as e:
        R.parse_responses(body)
    assert e.value.status == 400 and needle in e.value.message


def _rid(i: int) -> str:
    return f"resp_{i:032x}"


def test_response_store_bounds_and_retention(tmp_path):
    store = ResponseStore(tmp_path, max_count=3, max_bytes=10_000, retention_s=3600)
    for i in range(5):
        store.put(_rid(i), {"id": _rid(i)}, [{"role": "user", "content": f"turn {i}"}])
        os.utime(tmp_path / f"{_rid(i)}.json", (time.time() - 10 + i, time.time() - 10 + i))
    store.prune()
    assert [store.get(_rid(i)) is not None for i in range(5)] == [False, False, True, True, True]
    assert store.get(_rid(4)).conversation == [{"role": "user", "content": "turn 4"}]
    old = tmp_path / f"{_rid(2)}.json"
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    assert store.get(_rid(2)) is None and not old.exists()  # past the retention period: deleted
    store.put(_rid(9), {"id": _rid(9), "pad": "x" * 20_000}, [])
    assert store.get(_rid(9)) is None  # bigger than the whole budget: not kept
    assert store.delete(_rid(4)) and not store.delete(_rid(4))
    assert store.get("../../etc/passwd") is None and not store.delete("resp_../x")
    with pytest.raises(ValueError):
        store.put("../x", {}, [])
    assert json.loads((tmp_path / f"{_rid(3)}.json").read_text())["response"] == {"id": _rid(3)}


def test_text_stream_reports_the_stop_string_that_hit():
    s = TextStream(["END", "STOP"])
    assert s.push(b"abc ST") == ("abc ", False) and s.matched is None
    assert s.push(b"OP more") == ("", True) and s.matched == "STOP"


async def test_api_key_as_x_api_key_and_anthropic_401(aiohttp_client, tmp_path):
    key = "k" * 32
    config = ServeConfig(preload=False, data_dir=tmp_path, security=SecurityConfig(api_key=key))
    client = await aiohttp_client(create_app(config))
    missing = f"/v1/responses/{_rid(1)}"
    assert (await client.get(missing, headers={"x-api-key": key})).status == 404  # past the key check
    assert (await client.get(missing, headers={"Authorization": f"Bearer {key}"})).status == 404
    assert (await client.get(missing, headers={"x-api-key": key + "x"})).status == 401
    r = await client.post("/v1/messages", json={}, headers={"x-api-key": "wrong", "anthropic-version": "2023-06-01"})
    assert r.status == 401
    assert await r.json() == {"type": "error", "error": {"type": "authentication_error",
                                                         "message": "the API key is not valid"}}
    r = await client.post("/v1/messages/count_tokens", data=b"{", headers={"x-api-key": key})
    assert r.status == 400 and (await r.json())["error"]["type"] == "invalid_request_error"


def test_hosted_tools_are_not_offered_and_not_refused():
    a = A.parse_messages({"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}], "tools": [
        {"type": "web_search_20250305", "name": "web_search"}, {"type": "bash_20250124", "name": "bash"},
        {"name": "f", "input_schema": {"type": "object"}}]})
    assert [t["function"]["name"] for t in a.tools] == ["bash", "f"]
    assert a.tools[0]["function"]["parameters"]["properties"]["command"] == {"type": "string"}
    r = R.parse_responses({"input": "hi", "tools": [{"type": "web_search"}, {"type": "file_search"},
                                                    {"type": "function", "name": "g"}]})
    assert [t["function"]["name"] for t in r.tools] == ["g"]
