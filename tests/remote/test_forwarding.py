"""What reaches an upstream and what comes back, against a scripted upstream on loopback: every
wire format streamed frame by frame, tool calls, reasoning and JSON output in each client's
own form, and Ollama's load requests."""

from __future__ import annotations

import anthropic
import ollama

from tests.remote.test_faults import CHAT, add, health, oai, post

async def test_a_working_upstream_streams_frame_by_frame_in_every_format(hearth, scripted):
    up = await scripted("ok")
    h = await hearth()
    added = await add(h, "box", up.url)
    assert added["models"] == ["m1"] and added["error"] is None
    client = oai(h)
    pieces = [c.choices[0].delta.content async for c in await client.chat.completions.create(stream=True, **CHAT)
              if c.choices and c.choices[0].delta.content]
    assert pieces == ["Hello", " world", "!"]  # one upstream event, one frame
    reply = await client.chat.completions.create(**CHAT)
    assert reply.choices[0].message.content == "Hello world!" and reply.choices[0].finish_reason == "stop"
    assert reply.usage.prompt_tokens == 5 and reply.usage.completion_tokens == 3
    text = await client.completions.create(model="m1", prompt="Say", max_tokens=4)
    assert text.choices[0].text == "Hello world!" and up.requests[-1]["path"] == "/v1/completions"
    assert up.requests[-1]["body"]["prompt"] == "Say" and up.requests[-1]["body"]["max_tokens"] == 4
    olla = await ollama.AsyncClient(host=h.url).chat(model="m1", messages=CHAT["messages"])
    assert olla.message.content == "Hello world!"
    msg = await anthropic.AsyncAnthropic(base_url=h.url, api_key="unused", max_retries=0).messages.create(
        model="m1", max_tokens=8, messages=CHAT["messages"])
    assert msg.content[0].text == "Hello world!"
    response = await client.responses.create(model="m1", input="Hi", max_output_tokens=16)
    assert response.output_text == "Hello world!"
    assert (await health(h, "box"))["state"] == "up"


async def test_ollama_load_and_unload_of_a_remote_model_answer_done(hearth, scripted):
    up = await scripted("ok")
    h = await hearth()
    await add(h, "box", up.url)
    status, _, body = await post(h, "/api/generate", {"model": "m1"})
    assert status == 200 and body["done"] and body["done_reason"] == "load" and up.requests == []
    status, _, body = await post(h, "/api/chat", {"model": "m1", "messages": [], "keep_alive": 0})
    assert status == 200 and body["done_reason"] == "unload"


WEATHER = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                              "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                             "required": ["city"]}}}]


async def test_tool_calls_go_to_the_upstream_natively_and_come_back_in_each_format(hearth, scripted):
    up = await scripted("tools")
    h = await hearth()
    await add(h, "box", up.url)
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    reply = await oai(h).chat.completions.create(model="m1", messages=ask, tools=WEATHER, max_tokens=32)
    sent = up.requests[-1]["body"]
    assert sent["tools"] == WEATHER and sent["messages"] == ask  # as the client sent them, not rewritten
    assert "tool_choice" not in sent  # auto: the upstream's default
    forced = {"type": "function", "function": {"name": "get_weather"}}
    for choice in ("required", forced):  # a forced call stays forced on the upstream
        await oai(h).chat.completions.create(model="m1", messages=ask, tools=WEATHER, tool_choice=choice, max_tokens=32)
        assert up.requests[-1]["body"]["tool_choice"] == choice
    call = reply.choices[0].message.tool_calls[0]
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city": "Paris"}')
    assert reply.choices[0].finish_reason == "tool_calls"
    names = []
    async for c in await oai(h).chat.completions.create(model="m1", messages=ask, tools=WEATHER, stream=True):
        for tc in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            if tc.function and tc.function.name:
                names.append(tc.function.name)
    assert names == ["get_weather"]
    olla = await ollama.AsyncClient(host=h.url).chat(model="m1", messages=ask, tools=WEATHER)
    assert olla.message.tool_calls[0].function.arguments == {"city": "Paris"}
    msg = await anthropic.AsyncAnthropic(base_url=h.url, api_key="unused", max_retries=0).messages.create(
        model="m1", max_tokens=32, messages=ask, tools=[{"name": "get_weather", "description": "weather",
                                                         "input_schema": WEATHER[0]["function"]["parameters"]}])
    assert msg.stop_reason == "tool_use" and msg.content[-1].input == {"city": "Paris"}
    # the result goes back as OpenAI's tool message, arguments as JSON text
    history = ask + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    await oai(h).chat.completions.create(model="m1", messages=history, tools=WEATHER, max_tokens=8)
    sent = up.requests[-1]["body"]["messages"]
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'
    assert sent[2] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}


async def test_the_upstreams_reasoning_comes_back_as_reasoning_in_each_format(hearth, scripted):
    up = await scripted("reasoning")
    h = await hearth()
    await add(h, "box", up.url)
    ask = [{"role": "user", "content": "Capital of France?"}]
    reply = await oai(h).chat.completions.create(model="m1", messages=ask)
    message = reply.choices[0].message
    assert message.content == "Paris." and message.model_extra["reasoning_content"] == "Let me think."
    olla = await ollama.AsyncClient(host=h.url).chat(model="m1", messages=ask, think=False)
    assert olla.message.content == "Paris."
    assert up.requests[-1]["body"]["chat_template_kwargs"] == {"enable_thinking": False}
    msg = await anthropic.AsyncAnthropic(base_url=h.url, api_key="unused", max_retries=0).messages.create(
        model="m1", max_tokens=32, messages=ask, thinking={"type": "enabled", "budget_tokens": 1024})
    kinds = {b.type: b for b in msg.content}
    assert kinds["thinking"].thinking == "Let me think." and kinds["text"].text == "Paris."


async def test_json_output_is_asked_of_the_upstream_in_openai_form(hearth, scripted):
    up = await scripted("ok")
    h = await hearth()
    await add(h, "box", up.url)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    await oai(h).chat.completions.create(**CHAT, response_format={
        "type": "json_schema", "json_schema": {"name": "place", "schema": schema}})
    sent = up.requests[-1]["body"]["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["schema"] == schema
    await ollama.AsyncClient(host=h.url).chat(model="m1", messages=CHAT["messages"], format="json")
    assert up.requests[-1]["body"]["response_format"] == {"type": "json_object"}
    status, _, body = await post(h, "/v1/completions", {"model": "m1", "prompt": "x", "max_tokens": 4,
                                                         "response_format": {"type": "json_object"}})
    assert status == 400 and "only JSON output" in body["error"]["message"]


async def test_completion_logprobs_come_back_from_the_upstream(hearth, scripted):
    up = await scripted("ok")
    h = await hearth()
    await add(h, "box", up.url)
    text = await oai(h).completions.create(model="m1", prompt="Say", max_tokens=4, logprobs=1)
    assert up.requests[-1]["body"]["logprobs"] == 1
    lp = text.choices[0].logprobs
    assert lp.tokens == ["Hello", " world", "!"] and lp.token_logprobs == [-0.25] * 3
    assert lp.text_offset == [0, 5, 11] and lp.top_logprobs[0] == {"Hello": -0.25}
    status, _, body = await post(h, "/v1/completions", {"model": "m1", "prompt": "Say", "max_tokens": 4,
                                                         "echo": True, "logprobs": 1})
    assert status == 400 and "echo with logprobs" in body["error"]["message"]
    status, _, body = await post(h, "/v1/chat/completions", {**CHAT, "logprobs": True})
    assert status == 400 and "not for chats" in body["error"]["message"] and len(up.requests) == 1
