"""Every wire format's parser builds the one internal request: typed messages with calls (arguments
as objects) and results, tools, the tool choice, reasoning and the constraint; the same conversation
sent in OpenAI chat, Responses, Anthropic and Ollama bodies is the same request, and a bad tool is
a 400 naming the field as each wire names it. Also: the response store's bounds; the API key as
x-api-key; the stop string the engine reports."""

from __future__ import annotations

import json
import os
import time

import pytest

from runtime.config import SecurityConfig, ServeConfig
from runtime.engine.constraint_spec import JSON_OBJECT, JSON_SCHEMA
from runtime.engine.text_stream import TextStream
from runtime.remote.wire import request_body
from runtime.sampling_params import SamplingParams
from runtime.server.generate.request import Message, ToolCall, ToolSpec
from runtime.server.wire.anthropic import anthropic_schemas as A
from runtime.server.wire.ollama.ollama_schemas import parse_ollama_chat
from runtime.server.wire.openai.schemas import parse_chat
from runtime.server.wire.responses import responses_schemas as R
from runtime.server.app import create_app
from runtime.server.errors import ApiError
from runtime.server.wire.responses.responses_store import ResponseStore
from runtime.tool_choice import AUTO, NONE, REQUIRED, ToolChoice, function_choice


def test_anthropic_blocks_become_internal_messages():
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
    gen = A.parse_messages(body).gen
    assert gen.messages == [
        Message("system", "Be kind.\nBe brief."),
        Message("user", "Weather in Paris?"),
        Message("assistant", "Let me look.", [ToolCall("toolu_1", "weather", {"city": "Paris"})]),
        Message("tool", "18C", tool_call_id="toolu_1"),
        Message("user", "Thanks. And Rome?")]
    assert gen.tools == [ToolSpec("weather", "Weather now", {"type": "object"})]
    assert gen.tools[0].param == "tools.0.input_schema"  # a schema the compiler refuses is named so
    assert (gen.tool_choice, gen.parallel_tool_calls, gen.reasoning_budget, gen.think) == (REQUIRED, False, 2048, True)
    assert gen.messages[2].template()["tool_calls"] == [
        {"id": "toolu_1", "type": "function", "function": {"name": "weather", "arguments": {"city": "Paris"}}}]


@pytest.mark.parametrize("choice, expected", [
    ({"type": "auto"}, AUTO), ({"type": "none"}, NONE), ({"type": "any"}, REQUIRED),
    ({"type": "tool", "name": "f"}, function_choice("f")), (None, None)])
def test_anthropic_tool_choice(choice, expected):
    assert A.read_tool_choice(choice)[0] == expected


def test_anthropic_error_result_and_structured_output():
    assert A.tool_message({"tool_use_id": "t", "content": "boom", "is_error": True}, "m").content == "Error: boom"
    job, effort = A.read_output_config({"format": {"type": "json_schema", "schema": {"type": "object"}},
                                        "effort": "low"})
    assert job is not None and (job.kind, job.source, job.param, effort) == (
        JSON_SCHEMA, {"type": "object"}, "output_config.format.schema", "low")
    gen = A.parse_messages({"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}],
                            "output_config": {"effort": "max"}}).gen
    assert (gen.think, gen.reasoning_effort) == (True, "high")  # past the internal scale: its top


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
    assert m.gen.params.max_tokens is None and not m.gen.tools


def test_responses_items_become_internal_messages():
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
        Message("developer", "Use tools."),
        Message("user", "Weather in Paris?"),
        Message("assistant", "", [ToolCall("call_1", "weather", {"city": "Paris"}), ToolCall("call_2", "time", {})]),
        Message("tool", "18C", tool_call_id="call_1"),
        Message("assistant", "It is 18C.")]
    gen = r.gen
    assert gen.tools == [ToolSpec("weather", None, {"type": "object"})] and gen.tools[0].param == "tools[0].parameters"
    assert r.shown_tools == [{"type": "function", "name": "weather", "description": None,
                              "parameters": {"type": "object"}, "strict": True}]
    assert gen.tool_choice == function_choice("weather")
    assert gen.constraint is not None and (gen.constraint.kind, gen.constraint.param) == (JSON_SCHEMA,
                                                                                           "text.format.schema")
    assert (gen.think, gen.reasoning_effort) == (True, "high")
    assert (r.instructions, r.store, r.reasoning_effort, r.previous_response_id) == ("Be brief.", False, "high", "resp_x")
    assert gen.params.max_tokens == 5 and gen.params.temperature == 0
    assert R.parse_responses({"input": "hi", "text": {"format": {"type": "json_object"}}}).gen.constraint.kind == JSON_OBJECT


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
        store.put(_rid(i), {"id": _rid(i)}, [Message("user", f"turn {i}")])
        os.utime(_stored(tmp_path, _rid(i)), (time.time() - 10 + i, time.time() - 10 + i))
    store.prune()
    assert [store.get(_rid(i)) is not None for i in range(5)] == [False, False, True, True, True]
    assert store.get(_rid(4)).conversation == [Message("user", "turn 4")]
    old = _stored(tmp_path, _rid(2))
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    assert store.get(_rid(2)) is None and not old.exists()  # past the retention period: deleted
    store.put(_rid(9), {"id": _rid(9), "pad": "x" * 20_000}, [])
    assert store.get(_rid(9)) is None  # bigger than the whole budget: not kept
    assert store.delete(_rid(4)) and not store.delete(_rid(4))
    assert store.get("../../etc/passwd") is None and not store.delete("resp_../x")
    with pytest.raises(ValueError):
        store.put("../x", {}, [])
    assert json.loads(_stored(tmp_path, _rid(3)).read_text())["response"] == {"id": _rid(3)}


def _stored(root, rid: str):
    """A stored response's file (its name also carries a tag of the client that stored it)."""
    [path] = root.glob(f"{rid}*.json")
    return path


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
    assert [t.name for t in a.gen.tools] == ["bash", "f"]
    assert a.gen.tools[0].parameters["properties"]["command"] == {"type": "string"}
    r = R.parse_responses({"input": "hi", "tools": [{"type": "web_search"}, {"type": "file_search"},
                                                    {"type": "function", "name": "g"}]})
    assert [t.name for t in r.gen.tools] == ["g"]


# -- one conversation, four wire formats, one request ----------------------------------------
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CONVERSATION = [
    Message("system", "Be brief."),
    Message("user", "Weather in Paris?"),
    Message("assistant", "", [ToolCall("call_1", "weather", {"city": "Paris"})]),
    Message("tool", "18C", tool_call_id="call_1"),
    Message("user", "And Rome?")]
TOOLS = [ToolSpec("weather", "Weather now", WEATHER_SCHEMA), ToolSpec("clock", None, {"type": "object"})]
OPENAI_TOOLS = [{"type": "function", "function": {"name": "weather", "description": "Weather now",
                                                  "parameters": WEATHER_SCHEMA}},
                {"type": "function", "function": {"name": "clock", "parameters": {"type": "object"}}}]


def _openai_chat() -> dict:
    return {"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        {"role": "user", "content": "And Rome?"}],
        "tools": OPENAI_TOOLS, "tool_choice": {"type": "function", "function": {"name": "weather"}},
        "parallel_tool_calls": False, "reasoning_effort": "high"}


def _responses() -> dict:
    return {"input": [
        {"role": "system", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
        {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
        {"role": "user", "content": "And Rome?"}],
        "tools": [{"type": "function", "name": "weather", "description": "Weather now", "parameters": WEATHER_SCHEMA},
                  {"type": "function", "name": "clock", "parameters": {"type": "object"}, "strict": True}],
        "tool_choice": {"type": "function", "name": "weather"}, "parallel_tool_calls": False,
        "reasoning": {"effort": "high"}}


def _anthropic() -> dict:
    return {"max_tokens": 64, "system": "Be brief.", "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "18C"},
                                     {"type": "text", "text": "And Rome?"}]}],
        "tools": [{"name": "weather", "description": "Weather now", "input_schema": WEATHER_SCHEMA},
                  {"name": "clock", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "tool", "name": "weather", "disable_parallel_tool_use": True},
        "output_config": {"effort": "high"}}


def _ollama() -> dict:
    return {"model": "m", "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "function": {"name": "weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        {"role": "user", "content": "And Rome?"}],
        "tools": OPENAI_TOOLS, "options": {"tool_choice": "weather"}, "parallel_tool_calls": False, "think": "high"}


def _typed(wire: str, body: dict):
    if wire == "openai":
        return parse_chat(body)
    if wire == "responses":
        r = R.parse_responses(body)
        r.gen.messages = r.input_messages  # the service adds instructions and stored turns in front
        return r.gen
    if wire == "anthropic":
        return A.parse_messages(body).gen
    gen = parse_ollama_chat(body).gen
    assert gen is not None
    return gen


WIRES = {"openai": _openai_chat, "responses": _responses, "anthropic": _anthropic, "ollama": _ollama}


@pytest.mark.parametrize("wire", WIRES)
def test_one_conversation_is_one_request_in_every_wire(wire):
    gen = _typed(wire, WIRES[wire]())
    assert gen.messages == CONVERSATION
    assert gen.tools == TOOLS
    assert (gen.tool_choice, gen.parallel_tool_calls) == (function_choice("weather"), False)
    assert (gen.think, gen.reasoning_effort) == (True, "high")
    # the arguments stay an object all the way to the template
    assert gen.messages[2].template()["tool_calls"][0]["function"]["arguments"] == {"city": "Paris"}
    assert [t.openai() for t in gen.tools] == OPENAI_TOOLS


def test_the_typed_requests_of_all_wires_are_equal():
    gens = [_typed(w, make()) for w, make in WIRES.items()]
    first = gens[0]
    for g in gens[1:]:
        assert (g.messages, g.tools, g.tool_choice, g.parallel_tool_calls, g.think, g.reasoning_effort) == (
            first.messages, first.tools, first.tool_choice, first.parallel_tool_calls, first.think,
            first.reasoning_effort)


# wire, body's tools (and choice), the field the 400 names, a word of the message in the wire's style
BAD_TOOLS = [
    ("openai", {"tools": [{"type": "function", "function": {"name": "f", "parameters": 7}}]},
     "tools[0].function.parameters", "'tools[0].function.parameters'"),
    ("responses", {"tools": [{"type": "function", "name": "f", "parameters": 7}]},
     "tools[0].parameters", "'tools[0].parameters'"),
    ("anthropic", {"tools": [{"name": "f", "input_schema": 7}]}, "tools.0.input_schema", "tools.0.input_schema"),
    ("ollama", {"tools": [{"type": "function", "function": {"name": "f", "parameters": 7}}]},
     "tools[0].function.parameters", "'tools[0].function.parameters'"),
    ("openai", {"tools": [{"type": "function", "function": {"name": "bad name!"}}]},
     "tools[0].function.name", "1-64 letters"),
    ("responses", {"tools": [{"type": "namespace", "name": "ns", "tools": [
        {"type": "function", "name": "ok"}, {"type": "function", "name": "bad name!"}]}]},
     "tools[0].tools[1].name", "1-64 letters"),
    ("anthropic", {"tools": [{"name": "bad name!", "input_schema": {"type": "object"}}]},
     "tools.0.name", "tools.0.name: must be 1-64 letters"),
    ("ollama", {"tools": [{"type": "function", "function": {"name": "f", "description": 3}}]},
     "tools[0].function.description", "must be a string"),
    ("openai", {"tools": OPENAI_TOOLS + OPENAI_TOOLS[:1]}, "tools[2].function.name", "'weather'"),
    ("responses", {"tools": [{"type": "function", "name": "f"}, {"type": "custom", "name": "f"}]},
     "tools[1].name", "defined once"),
    ("anthropic", {"tools": [{"name": "f", "input_schema": {}}, {"name": "f", "input_schema": {}}]},
     "tools.1.name", "defined once"),
    ("anthropic", {"tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "tool", "name": "g"}},
     "tool_choice.name", "not in 'tools'"),
    ("responses", {"tools": [], "tool_choice": "required"}, "tool_choice", "no 'tools'"),
    ("ollama", {"tools": OPENAI_TOOLS, "tool_choice": "nowhere"}, "tool_choice", "not in 'tools'"),
    ("openai", {"tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(257)]}, "tools",
     "the limit is 256"),
]


@pytest.mark.parametrize("wire, tools, param, words", BAD_TOOLS)
def test_a_bad_tool_names_its_wires_field(wire, tools, param, words):
    body = {**WIRES[wire](), "tool_choice": None, **tools}
    if wire == "ollama":
        body["options"] = {}
    if body["tool_choice"] is None:
        del body["tool_choice"]
    with pytest.raises(ApiError) as e:
        _typed(wire, body)
    assert e.value.status == 400 and e.value.param == param and words in e.value.message, e.value.message


@pytest.mark.parametrize("wire, body, param", [
    ("openai", {"messages": [{"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]}]},
     "messages[0].tool_calls[0].function.arguments"),
    ("responses", {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "[1]"}]},
     "input[0].arguments"),
    ("anthropic", {"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "c", "name": "f", "input": [1]}]}, {"role": "user", "content": "go"}]},
     "messages.1.content.0.input"),
    ("ollama", {"model": "m", "messages": [{"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "f", "arguments": 5}}]}]}, "messages[0].tool_calls[0].function.arguments"),
])
def test_an_earlier_calls_arguments_must_be_an_object(wire, body, param):
    with pytest.raises(ApiError) as e:
        _typed(wire, body)
    assert e.value.status == 400 and e.value.param == param, e.value.message


def test_a_stored_conversation_keeps_calls_as_objects(tmp_path):
    store = ResponseStore(tmp_path)
    store.put(_rid(1), {"id": _rid(1)}, CONVERSATION)
    assert store.get(_rid(1)).conversation == CONVERSATION
    # a conversation stored with its calls' arguments as JSON text reads the same
    old = [m.template() for m in CONVERSATION]
    old[2]["tool_calls"][0]["function"]["arguments"] = '{"city": "Paris"}'
    (tmp_path / f"{_rid(2)}.json").write_text(json.dumps({"response": {}, "conversation": old}))
    assert store.get(_rid(2)).conversation == CONVERSATION


@pytest.mark.parametrize("choice, sent", [
    (None, None), (AUTO, None), (REQUIRED, "required"), (function_choice("weather"),
                                                         {"type": "function", "function": {"name": "weather"}})])
def test_a_remote_engine_gets_the_choice_with_the_submission(choice: ToolChoice | None, sent):
    _, body = request_body("m", SamplingParams(), messages=[m.template() for m in CONVERSATION], tools=OPENAI_TOOLS,
                           tool_choice=choice)
    assert body.get("tool_choice") == sent
    assert json.loads(body["messages"][2]["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}


@pytest.mark.parametrize("path, param", [("/hearth/search?q=x&limit=%C2%B3", "limit"),
                                         ("/hearth/fit?model=smollm2-135m&ctx=%C2%B3", "ctx"),
                                         ("/hearth/fit?model=smollm2-135m&ctx=%D9%A3", "ctx")])
async def test_digits_of_other_scripts_are_a_400_not_a_500(aiohttp_client, tmp_path, path, param):
    """'³'.isdigit() and '٣'.isdigit() are True, and int() refuses them: a query number is checked
    as ASCII digits (the fuzzer's GET /hearth/search?limit=³ was a 500)."""
    client = await aiohttp_client(create_app(ServeConfig(preload=False, data_dir=tmp_path)))
    r = await client.get(path)
    assert r.status == 400, await r.text()
    assert (await r.json())["error"]["param"] == param
