"""Structured output through the official clients against a live server (SmolLM2, greedy).

Every reply parses and validates with ``jsonschema``; invalid schemas are a 400 naming the
field; Ollama's ``format`` works the same way.
"""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import jsonschema
import ollama
import pytest

from tests.server.conftest import live_server
from tests.server.structured_schemas import INVALID, SCHEMAS

PROMPT = "Reply with JSON only: make up an example that fits the format."


@pytest.fixture(scope="module")
def server(smollm2_path):
    s = live_server("--parallel", "4", "--ctx", "4096")
    yield s
    s.stop()


@pytest.fixture()
def oai(server):
    from openai import OpenAI

    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)


def _ask(oai, schema: dict) -> str:
    r = oai.chat.completions.create(
        model="smollm2-135m", messages=[{"role": "user", "content": PROMPT}], temperature=0, max_tokens=160,
        response_format={"type": "json_schema", "json_schema": {"name": "reply", "schema": schema, "strict": True}})
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    return r.choices[0].message.content


@pytest.mark.timeout(1200)
def test_every_schema_reply_parses_and_validates(oai):
    assert len(SCHEMAS) >= 30
    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(lambda s: _ask(oai, s), SCHEMAS))
    for schema, text in zip(SCHEMAS, replies):
        jsonschema.validate(json.loads(text), schema)


def test_json_object_and_streaming(oai):
    r = oai.chat.completions.create(
        model="smollm2-135m", messages=[{"role": "user", "content": 'Reply with a JSON object such as {"name": "Ann"}.'}],
        temperature=0, max_tokens=300, response_format={"type": "json_object"})
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    schema = SCHEMAS[13]
    stream = oai.chat.completions.create(
        model="smollm2-135m", messages=[{"role": "user", "content": PROMPT}], temperature=0, max_tokens=160,
        stream=True, response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema}})
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    jsonschema.validate(json.loads(text), schema)
    assert text == _ask(oai, schema)  # streamed and whole replies are the same greedy text


def test_the_same_prompt_unconstrained_is_not_json(oai):
    """The constraint is what makes the reply JSON (the test would pass vacuously otherwise)."""
    r = oai.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": PROMPT}],
                                    temperature=0, max_tokens=60)
    with pytest.raises(ValueError):
        jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMAS[1])


def test_regex_and_grammar_extensions(server):
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "A date?"}], "temperature": 0,
            "max_tokens": 20, "regex": "[0-9]{4}-[0-9]{2}-[0-9]{2}"}
    r = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120).json()
    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", r["choices"][0]["message"]["content"])
    body = {"model": "smollm2-135m", "prompt": "Is the sky blue?", "temperature": 0, "max_tokens": 5,
            "grammar": 'root ::= "yes" | "no"'}
    r = httpx.post(f"{server.url}/v1/completions", json=body, timeout=120).json()
    assert r["choices"][0]["text"] in ("yes", "no")


@pytest.mark.parametrize("schema,needle", INVALID)
def test_invalid_schemas_are_400(server, schema, needle):
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "hi"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}
    r = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "response_format.json_schema.schema" and err["code"] == "invalid_schema"
    assert needle.lower() in err["message"].lower(), err["message"]


@pytest.mark.parametrize("body,param", [
    ({"response_format": {"type": "yaml"}}, "response_format.type"),
    ({"response_format": "json"}, "response_format"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format.json_schema.schema"),
    ({"regex": "[a-"}, "regex"),
    ({"grammar": "root ::= nope"}, "grammar"),
])
def test_bad_response_formats_are_400(server, body, param):
    full = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "hi"}], **body}
    r = httpx.post(f"{server.url}/v1/chat/completions", json=full, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert server.health()["engine"]["state"] in ("running", "idle")


def test_ollama_format_json_and_schema(server):
    client = ollama.Client(host=server.url, timeout=300)
    r = client.chat(model="smollm2-135m", messages=[{"role": "user", "content": 'Reply with a JSON object such as {"name": "Ann"}.'}],
                    format="json", options={"temperature": 0, "num_predict": 300})
    assert r.done_reason == "stop", r.message.content
    assert isinstance(json.loads(r.message.content), dict)
    schema = SCHEMAS[31]
    parts = [c.message.content for c in client.chat(
        model="smollm2-135m", messages=[{"role": "user", "content": PROMPT}], format=schema, stream=True,
        options={"temperature": 0, "num_predict": 160})]
    jsonschema.validate(json.loads("".join(parts)), schema)
    r = client.generate(model="smollm2-135m", prompt=PROMPT, format=SCHEMAS[7],
                        options={"temperature": 0, "num_predict": 40})
    jsonschema.validate(json.loads(r.response), SCHEMAS[7])
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="smollm2-135m", messages=[{"role": "user", "content": "hi"}], format={"type": "foo"})
    assert e.value.status_code == 400 and "format" in str(e.value)
