"""Tool calling on both embedded models through the official openai and ollama clients.

SmolLM2's template is ChatML without tools (SmolLM2's function-calling prompt is used);
Gemma 3 270M has no template (the generic JSON format). Neither is a tool-calling model: with
``tool_choice`` required or named the grammar makes every reply a valid call anyway.
"""

from __future__ import annotations

import json

import jsonschema
import ollama
import pytest

from tests.server.conftest import live_server

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 30},
        "unit": {"enum": ["celsius", "fahrenheit"]}}, "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a time zone",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 30}},
                   "required": ["tz"], "additionalProperties": False}}}
TOOLS = [WEATHER, TIME]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris, and what time is it there?"}]
MODELS = ["smollm2-135m", "gemma-3-270m"]


@pytest.fixture(scope="module")
def server(smollm2_path, gemma_path):
    s = live_server("--parallel", "2", "--ctx", "4096")
    yield s
    s.stop()


@pytest.fixture()
def oai(server):
    from openai import OpenAI

    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)


def _valid(name: str, arguments: str | dict, schemas: dict = SCHEMAS) -> dict:
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    jsonschema.validate(args, schemas[name])
    return args


def _as_ollama_sends(schema: dict) -> dict:
    """The ollama client's Tool model keeps type, properties (type, description, enum) and
    required: additionalProperties and maxLength never reach the server."""
    props = {k: {f: v[f] for f in ("type", "description", "enum") if f in v} for k, v in schema["properties"].items()}
    return {"type": "object", "properties": props, "required": schema["required"]}


OLLAMA_SCHEMAS = {name: _as_ollama_sends(s) for name, s in SCHEMAS.items()}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_time"}}])
def test_required_and_named_always_call(oai, model, choice):
    kw = dict(model=model, messages=ASK, tools=TOOLS, tool_choice=choice, temperature=0, max_tokens=120,
              parallel_tool_calls=False)
    r = oai.chat.completions.create(**kw)
    c = r.choices[0]
    assert c.finish_reason == "tool_calls"
    assert c.message.content is None and len(c.message.tool_calls) == 1
    call = c.message.tool_calls[0]
    assert call.id.startswith("call_") and call.type == "function"
    if isinstance(choice, dict):
        assert call.function.name == "get_time"
    _valid(call.function.name, call.function.arguments)
    # streamed: the client assembles the deltas into the same call
    with oai.chat.completions.stream(**kw) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    fc = final.choices[0]
    assert fc.finish_reason == "tool_calls" and not fc.message.content
    assert [(t.function.name, json.loads(t.function.arguments)) for t in fc.message.tool_calls] == \
        [(call.function.name, json.loads(call.function.arguments))]


def test_stream_deltas_carry_index_id_name_then_arguments(oai):
    chunks = list(oai.chat.completions.create(model="smollm2-135m", messages=ASK, tools=TOOLS, tool_choice="required",
                                              temperature=0, max_tokens=120, stream=True))
    deltas = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
    assert deltas[0].index == 0 and deltas[0].id and deltas[0].function.name in SCHEMAS
    args = "".join(d.function.arguments or "" for d in deltas if d.index == 0)
    _valid(deltas[0].function.name, args)
    assert all(not (ch.choices[0].delta.content or "") for ch in chunks if ch.choices)  # no markup as text
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("model", MODELS)
def test_arguments_stream_token_by_token_on_every_wire_format(server, model):
    """A call's arguments arrive in many deltas as the model writes them (agents show a long file
    being written), and they join into the call's valid JSON, on all four formats."""
    import anthropic
    from openai import OpenAI

    oai = OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)
    kw = dict(model=model, tools=[WEATHER], tool_choice="required", temperature=0, stream=True)
    chunks = list(oai.chat.completions.create(messages=ASK, max_tokens=120, parallel_tool_calls=False, **kw))
    pieces = [tc.function.arguments for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])
              if tc.function.arguments]
    assert len(pieces) > 3, pieces
    _valid("get_weather", "".join(pieces))

    responses = list(oai.responses.create(model=model, input=ASK[0]["content"], temperature=0, stream=True,
                                          max_output_tokens=120, parallel_tool_calls=False, tool_choice="required",
                                          tools=[{"type": "function", **WEATHER["function"]}]))
    pieces = [e.delta for e in responses if e.type == "response.function_call_arguments.delta"]
    done = next(e for e in responses if e.type == "response.function_call_arguments.done")
    assert len(pieces) > 3 and "".join(pieces) == done.arguments
    _valid("get_weather", done.arguments)

    claude = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300)
    tool = {"name": "get_weather", "description": "weather", "input_schema": WEATHER["function"]["parameters"]}
    with claude.messages.stream(model=model, max_tokens=120, messages=ASK, tools=[tool], extra_body={"temperature": 0},
                                tool_choice={"type": "any", "disable_parallel_tool_use": True}) as s:
        events = list(s)
        final = s.get_final_message()
    pieces = [e.delta.partial_json for e in events if e.type == "content_block_delta"
              and e.delta.type == "input_json_delta"]
    assert len(pieces) > 3
    use = next(b for b in final.content if b.type == "tool_use")
    assert json.loads("".join(pieces)) == use.input
    _valid("get_weather", use.input)

    # Ollama has no partial call: each call is one line, whole, when its arguments close
    client = ollama.Client(host=server.url, timeout=300)
    lines = list(client.chat(model=model, messages=ASK, tools=[WEATHER], stream=True,
                             options={"temperature": 0, "num_predict": 120}, think=False))
    calls = [c for part in lines for c in (part.message.tool_calls or [])]
    for c in calls:
        _valid(c.function.name, dict(c.function.arguments), OLLAMA_SCHEMAS)


def test_none_never_calls(oai):
    r = oai.chat.completions.create(model="smollm2-135m", messages=ASK, tools=TOOLS, tool_choice="none",
                                    temperature=0, max_tokens=40)
    c = r.choices[0]
    assert not c.message.tool_calls and c.finish_reason in ("stop", "length") and c.message.content
    assert "<tool_call>" not in c.message.content


@pytest.mark.timeout(900)
def test_parallel_calls_when_allowed(oai):
    """An earlier turn with two calls at once shows the way; the grammar allows up to four."""
    calls = [{"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                                "arguments": '{"city": "Rome", "unit": "celsius"}'}},
             {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": '{"tz": "Europe/Rome"}'}}]
    history = [{"role": "user", "content": "Weather and time in Rome?"},
               {"role": "assistant", "content": None, "tool_calls": calls},
               {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 25}'},
               {"role": "tool", "tool_call_id": "call_2", "content": '{"time": "10:00"}'},
               {"role": "assistant", "content": "It is 25 degrees and 10:00 in Rome."},
               {"role": "user", "content": "Weather and time in Paris?"}]
    r = oai.chat.completions.create(model="smollm2-135m", tools=TOOLS, tool_choice="required", temperature=0,
                                    max_tokens=120, messages=history)
    got = r.choices[0].message.tool_calls
    assert len(got) >= 2, got
    for call in got:
        _valid(call.function.name, call.function.arguments)
    assert len({c.id for c in got}) == len(got)
    one = oai.chat.completions.create(model="smollm2-135m", tools=TOOLS, tool_choice="required", temperature=0,
                                      max_tokens=120, messages=history, parallel_tool_calls=False)
    assert len(one.choices[0].message.tool_calls) == 1  # not allowed: the grammar stops after one


def test_round_trip_with_a_tool_result(oai):
    first = oai.chat.completions.create(model="smollm2-135m", messages=ASK, tools=[WEATHER],
                                        tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                        temperature=0, max_tokens=80)
    call = first.choices[0].message.tool_calls[0]
    messages = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21, "sky": "clear"})},
    ]
    second = oai.chat.completions.create(model="smollm2-135m", messages=messages, tools=[WEATHER], tool_choice="none",
                                         temperature=0, max_tokens=30)
    assert second.choices[0].message.content and not second.choices[0].message.tool_calls
    alone = oai.chat.completions.create(model="smollm2-135m", messages=ASK, tools=[WEATHER], tool_choice="none",
                                        temperature=0, max_tokens=1)
    # the call and its result were in the prompt, as SmolLM2's format renders them
    assert second.usage.prompt_tokens > alone.usage.prompt_tokens + 20


def test_auto_reply_is_text_or_a_valid_call(oai):
    r = oai.chat.completions.create(model="smollm2-135m", messages=ASK, tools=TOOLS, temperature=0, max_tokens=120)
    c = r.choices[0]
    if c.message.tool_calls:
        assert c.finish_reason == "tool_calls"
        for call in c.message.tool_calls:
            _valid(call.function.name, call.function.arguments)
    else:
        assert "<tool_call>" not in (c.message.content or "")


@pytest.mark.parametrize("body,param", [
    ({"tools": "x"}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "nope"}}}]},
     "tools[0].function.parameters"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "other"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
])
def test_bad_tools_are_400(server, body, param):
    import httpx

    r = httpx.post(f"{server.url}/v1/chat/completions",
                   json={"model": "smollm2-135m", "messages": ASK, **body}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


@pytest.mark.parametrize("model", MODELS)
def test_ollama_client_tool_calls(server, model):
    """Ollama has no tool_choice; Hearth takes one from options (the client passes them on)."""
    client = ollama.Client(host=server.url, timeout=300)
    r = client.chat(model=model, messages=ASK, tools=TOOLS,
                    options={"temperature": 0, "num_predict": 250, "tool_choice": "required"})
    assert r.message.tool_calls and not r.message.content
    for call in r.message.tool_calls:
        _valid(call.function.name, call.function.arguments, OLLAMA_SCHEMAS)
    streamed = []
    for part in client.chat(model=model, messages=ASK, tools=TOOLS, stream=True,
                            options={"temperature": 0, "num_predict": 250, "tool_choice": "get_time"}):
        assert not part.message.content
        streamed += part.message.tool_calls or []
    assert [c.function.name for c in streamed] == ["get_time"]
    _valid("get_time", streamed[0].function.arguments, OLLAMA_SCHEMAS)
    # the round trip: the call and a tool result, then an answer
    history = ASK + [{"role": "assistant", "content": "", "tool_calls": [streamed[0].model_dump()]},
                     {"role": "tool", "content": '{"time": "14:05"}', "tool_name": "get_time"}]
    answer = client.chat(model=model, messages=history, tools=TOOLS,
                         options={"temperature": 0, "num_predict": 30, "tool_choice": "none"})
    assert answer.message.content and not answer.message.tool_calls


# -- schemas the grammar cannot enforce, and a response format beside tools -------------------
BASH = {"type": "function", "function": {"name": "Bash", "parameters": {
    "$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "additionalProperties": False,
    "properties": {"command": {"type": "string", "maxLength": 40}, "timeout": {"type": "number", "maximum": 600000}},
    "required": ["command"]}}}
#: what agents send and llguidance 1.9 cannot compile: each is relaxed, tool by tool
UNENFORCEABLE = [
    {"type": "function", "function": {"name": "TodoWrite", "parameters": {"type": "object", "properties": {
        "todos": {"type": "array", "maxItems": 2, "uniqueItems": True, "items": {"type": "string", "maxLength": 10}}},
        "required": ["todos"]}}},
    {"type": "function", "function": {"name": "Fetch", "parameters": {"type": "object", "properties": {
        "url": {"type": "string", "pattern": "^(?!file:)https?://.{1,20}$"}}, "required": ["url"]}}},
    {"type": "function", "function": {"name": "Edit", "parameters": {"type": "object", "properties": {
        "mode": {"enum": ["a", "b"]}, "n": {"type": "integer"}},
        "if": {"properties": {"mode": {"const": "a"}}}, "then": {"required": ["n"]}}}},
    {"type": "function", "function": {"name": "Tree", "parameters": {"type": "object", "properties": {
        "node": {"$ref": "#/$defs/loop"}}, "$defs": {"loop": {"$ref": "#/$defs/loop"}}}}},
]


def test_unenforceable_tool_schemas_are_relaxed_tool_by_tool(server):
    import httpx

    names = [t["function"]["name"] for t in UNENFORCEABLE]
    for choice in ("required", "auto"):
        r = httpx.post(f"{server.url}/v1/chat/completions", timeout=300, json={
            "model": "smollm2-135m", "messages": [{"role": "user", "content": "List the files."}],
            "tools": [BASH, *UNENFORCEABLE], "tool_choice": choice, "temperature": 0, "max_tokens": 40})
        assert r.status_code == 200, r.text
        assert r.headers["x-hearth-relaxed-tools"].split(", ") == names  # Bash compiles as it is
        for call in r.json()["choices"][0]["message"].get("tool_calls") or []:
            assert call["function"]["name"] in ["Bash", *names]
            assert isinstance(json.loads(call["function"]["arguments"]), dict)
    plain = httpx.post(f"{server.url}/v1/chat/completions", timeout=300, json={
        "model": "smollm2-135m", "messages": ASK, "tools": TOOLS, "tool_choice": "required", "max_tokens": 4})
    assert plain.status_code == 200 and "x-hearth-relaxed-tools" not in plain.headers


def test_pydantic_refs_inside_tool_parameters_are_enforced(oai):
    """pydantic writes nested models as ``#/$defs/...``: they resolve inside the call's grammar."""
    person = {"type": "function", "function": {"name": "add_person", "parameters": {
        "$defs": {"Person": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                                              "age": {"type": "integer", "minimum": 0, "maximum": 120}},
                             "required": ["name", "age"], "additionalProperties": False}},
        "type": "object", "properties": {"person": {"$ref": "#/$defs/Person"}}, "required": ["person"],
        "additionalProperties": False}}}
    r = oai.chat.completions.with_raw_response.create(
        model="smollm2-135m", messages=[{"role": "user", "content": "Add Ann, 31."}], tools=[person],
        tool_choice="required", temperature=0, max_tokens=60)
    assert "x-hearth-relaxed-tools" not in r.headers
    call = r.parse().choices[0].message.tool_calls[0]
    jsonschema.validate(json.loads(call.function.arguments), person["function"]["parameters"])


ANSWER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                           "sunny": {"type": "boolean"}}, "required": ["city", "sunny"],
          "additionalProperties": False}


@pytest.mark.parametrize("content", ["What is the weather in Paris?", "Say hello as JSON with a city.",
                                     "Is it sunny in Rome? Reply with JSON."])
def test_response_format_with_tools_is_a_call_or_a_matching_answer(oai, content):
    """One grammar from the first token: a well-formed call, or an answer the schema accepts
    (the OpenAI Agents SDK and pydantic-ai send both fields together)."""
    r = oai.chat.completions.create(
        model="smollm2-135m", messages=[{"role": "user", "content": content}], tools=TOOLS, temperature=0,
        max_tokens=80, response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER}})
    c = r.choices[0]
    if c.message.tool_calls:
        assert c.finish_reason == "tool_calls" and not c.message.content
        for call in c.message.tool_calls:
            _valid(call.function.name, call.function.arguments)
    else:
        assert c.finish_reason == "stop", c.message.content
        jsonschema.validate(json.loads(c.message.content), ANSWER)


def test_response_format_with_required_tools_calls_and_json_object_answers(oai):
    r = oai.chat.completions.create(
        model="smollm2-135m", messages=ASK, tools=TOOLS, tool_choice="required", temperature=0, max_tokens=80,
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": ANSWER}})
    assert r.choices[0].message.tool_calls  # a required call comes first; the format is for the answer after
    r = oai.chat.completions.create(
        model="smollm2-135m", messages=[{"role": "user", "content": 'Reply with the JSON object {"ok": true}.'}],
        tools=TOOLS, temperature=0, max_tokens=60, response_format={"type": "json_object"})
    c = r.choices[0]
    if c.message.tool_calls:
        for call in c.message.tool_calls:
            _valid(call.function.name, call.function.arguments)
    elif c.finish_reason == "stop":
        assert isinstance(json.loads(c.message.content), dict)
    else:  # cut at max_tokens: what there is was held to an object by the grammar
        assert c.finish_reason == "length" and c.message.content.startswith("{"), c.message.content


def test_a_regex_or_grammar_with_tools_is_still_refused(server):
    import httpx

    for extra, param in (({"regex": "[0-9]+"}, "regex"), ({"grammar": 'root ::= "a"'}, "grammar")):
        r = httpx.post(f"{server.url}/v1/chat/completions", timeout=60, json={
            "model": "smollm2-135m", "messages": ASK, "tools": TOOLS, "max_tokens": 4, **extra})
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
