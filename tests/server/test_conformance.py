"""The same requests through all four wire formats, with the official clients: one reply
pipeline means the same text, the same finish, the same token counts and the same errors.

SmolLM2 greedy: each scenario runs once per format (OpenAI chat, Responses, Anthropic Messages,
Ollama chat), streamed and whole, and the results are compared across formats.
"""

from __future__ import annotations

import json

import anthropic
import httpx
import ollama
import pytest
from openai import OpenAI

MODEL = "smollm2-135m"
ASK = "Name three colours."
MAX = 12


@pytest.fixture(scope="module")
def clients(server):
    return {
        "openai": OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300),
        "anthropic": anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300),
        "ollama": ollama.Client(host=server.url, timeout=300),
    }


def chat(c, stream: bool, **kw) -> dict:
    """OpenAI chat: text, finish, prompt and completion tokens."""
    if not stream:
        r = c["openai"].chat.completions.create(model=MODEL, messages=[{"role": "user", "content": ASK}],
                                                temperature=0, max_tokens=MAX, **kw)
        return {"text": r.choices[0].message.content, "finish": r.choices[0].finish_reason,
                "prompt": r.usage.prompt_tokens, "completion": r.usage.completion_tokens}
    chunks = list(c["openai"].chat.completions.create(model=MODEL, messages=[{"role": "user", "content": ASK}],
                                                      temperature=0, max_tokens=MAX, stream=True,
                                                      stream_options={"include_usage": True}, **kw))
    finish = next(ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason)
    return {"text": "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices), "finish": finish,
            "prompt": chunks[-1].usage.prompt_tokens, "completion": chunks[-1].usage.completion_tokens}


def responses(c, stream: bool, **kw) -> dict:
    args = dict(model=MODEL, input=[{"role": "user", "content": ASK}], temperature=0, max_output_tokens=MAX, **kw)
    if stream:
        events = list(c["openai"].responses.create(stream=True, **args))
        r = events[-1].response
        assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == r.output_text
    else:
        r = c["openai"].responses.create(**args)
    return {"text": r.output_text, "finish": "length" if r.status == "incomplete" else "stop",
            "prompt": r.usage.input_tokens, "completion": r.usage.output_tokens}


def messages(c, stream: bool, **kw) -> dict:
    args = dict(model=MODEL, max_tokens=MAX, messages=[{"role": "user", "content": ASK}],
                extra_body={"temperature": 0}, **kw)
    if stream:
        with c["anthropic"].messages.stream(**args) as s:
            text = "".join(s.text_stream)
            r = s.get_final_message()
        assert text == r.content[0].text
    else:
        r = c["anthropic"].messages.create(**args)
    finish = {"max_tokens": "length", "end_turn": "stop", "stop_sequence": "stop"}[r.stop_reason]
    return {"text": r.content[0].text if r.content else "", "finish": finish,
            "prompt": r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0),
            "completion": r.usage.output_tokens}


def ollama_chat(c, stream: bool, stop=None, **kw) -> dict:
    options = {"temperature": 0, "num_predict": MAX, **({"stop": stop} if stop else {})}
    args = dict(model=MODEL, messages=[{"role": "user", "content": ASK}], options=options, **kw)
    if stream:
        parts = list(c["ollama"].chat(stream=True, **args))
        r, text = parts[-1], "".join(p.message.content or "" for p in parts)
    else:
        r = c["ollama"].chat(**args)
        text = r.message.content
    return {"text": text, "finish": r.done_reason, "prompt": r.prompt_eval_count, "completion": r.eval_count}


FORMATS = {"chat": chat, "responses": responses, "messages": messages, "ollama": ollama_chat}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_plain_text_is_the_same_reply_with_the_same_counts(clients, stream):
    got = {name: f(clients, stream) for name, f in FORMATS.items()}
    first = got["chat"]
    assert first["finish"] == "length" and first["completion"] == MAX
    for name, r in got.items():
        assert r == first, (name, r, first)


def test_a_stop_sequence_ends_the_reply_the_same_everywhere(clients):
    probe = chat(clients, False)["text"]
    stop = probe.split()[1]  # the second word of the greedy reply
    cut = probe[:probe.index(stop)]
    got = {"chat": chat(clients, False, stop=[stop]), "responses": None,  # Responses has no stop strings
           "messages": messages(clients, False, stop_sequences=[stop]), "ollama": ollama_chat(clients, False, stop=[stop])}
    for name, r in got.items():
        if r is not None:
            assert r["text"] == cut and r["finish"] == "stop", (name, r)


def test_n_choices_each_have_their_logprobs_and_count_in_usage(clients):
    r = clients["openai"].chat.completions.create(model=MODEL, messages=[{"role": "user", "content": ASK}],
                                                  temperature=0, max_tokens=MAX, n=2, logprobs=True, top_logprobs=2)
    assert [c.index for c in r.choices] == [0, 1]
    for c in r.choices:
        assert "".join(e.token for e in c.logprobs.content) == c.message.content
    assert r.choices[0].message.content == r.choices[1].message.content  # greedy twice
    assert r.usage.completion_tokens == 2 * MAX


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                             "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                            "required": ["city"]}}}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_logprobs_survive_tools_offered(clients, stream):
    """Logprobs with tools offered (the reply read through the tool-call parser) cover every token."""
    kw = dict(model=MODEL, messages=[{"role": "user", "content": ASK}], temperature=0, max_tokens=MAX,
              logprobs=True, tools=[WEATHER], tool_choice="none")
    if stream:
        chunks = list(clients["openai"].chat.completions.create(stream=True, **kw))
        entries = [e for ch in chunks if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    else:
        r = clients["openai"].chat.completions.create(**kw)
        entries, text = r.choices[0].logprobs.content, r.choices[0].message.content
    assert len(entries) == MAX and "".join(e.token for e in entries) == text


def test_a_required_call_is_the_same_call_on_every_format(clients):
    oai, claude = clients["openai"], clients["anthropic"]
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    r = oai.chat.completions.create(model=MODEL, messages=ask, tools=[WEATHER], tool_choice="required", temperature=0,
                                    max_tokens=60, parallel_tool_calls=False)
    call = r.choices[0].message.tool_calls[0]
    want = (call.function.name, json.loads(call.function.arguments))
    fn = WEATHER["function"]
    resp = oai.responses.create(model=MODEL, input=ask, tools=[{"type": "function", **fn}], tool_choice="required",
                                temperature=0, max_output_tokens=60, parallel_tool_calls=False)
    item = next(i for i in resp.output if i.type == "function_call")
    msg = claude.messages.create(model=MODEL, max_tokens=60, messages=ask, extra_body={"temperature": 0},
                                 tools=[{"name": fn["name"], "description": fn["description"],
                                         "input_schema": fn["parameters"]}],
                                 tool_choice={"type": "any", "disable_parallel_tool_use": True})
    use = next(b for b in msg.content if b.type == "tool_use")
    assert (item.name, json.loads(item.arguments)) == want
    assert (use.name, use.input) == want and msg.stop_reason == "tool_use"
    assert r.choices[0].finish_reason == "tool_calls"


def test_structured_output_is_the_same_object_on_every_format(clients):
    schema = {"type": "object", "properties": {"colour": {"type": "string", "maxLength": 12}},
              "required": ["colour"], "additionalProperties": False}
    oai = clients["openai"]
    a = oai.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": ASK}], temperature=0,
                                    max_tokens=40, response_format={"type": "json_schema",
                                                                    "json_schema": {"name": "c", "schema": schema}})
    b = oai.responses.create(model=MODEL, input=[{"role": "user", "content": ASK}], temperature=0, max_output_tokens=40,
                             text={"format": {"type": "json_schema", "name": "c", "schema": schema}})
    c = clients["ollama"].chat(model=MODEL, messages=[{"role": "user", "content": ASK}], format=schema,
                               options={"temperature": 0, "num_predict": 40})
    assert json.loads(a.choices[0].message.content) == json.loads(b.output_text) == json.loads(c.message.content)


def test_each_error_kind_has_the_same_status_on_every_format(server):
    """A prompt past the context, an unknown model, a bad parameter: the same status everywhere,
    in each format's own error shape."""
    long = "word " * 5000  # past the 4096-token context
    cases = {
        "context": ({"model": MODEL}, long, 400),
        "unknown model": ({"model": "no-such-model-anywhere"}, "hi", 404),
    }
    for what, (extra, text, status) in cases.items():
        msgs = [{"role": "user", "content": text}]
        bodies = {"/v1/chat/completions": {**extra, "messages": msgs, "max_tokens": 4},
                  "/v1/responses": {**extra, "input": msgs, "max_output_tokens": 4},
                  "/v1/messages": {**extra, "messages": msgs, "max_tokens": 4},
                  "/api/chat": {**extra, "messages": msgs, "stream": False, "options": {"num_predict": 4}}}
        for path, body in bodies.items():
            r = httpx.post(f"{server.url}{path}", json=body, timeout=300)
            assert r.status_code == status, (what, path, r.status_code, r.text[:200])
            err = r.json()
            if path == "/api/chat":
                assert isinstance(err["error"], str) and err["error"]
            elif path == "/v1/messages":
                assert err["type"] == "error" and err["error"]["message"]
            else:
                assert err["error"]["message"]
            if what == "context" and path == "/v1/messages":
                assert err["error"]["message"].startswith("prompt is too long:")
