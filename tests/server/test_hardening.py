"""Hostile request bodies against a live ``hearth serve``: each gets a 400 that names the
field, and the engine worker never restarts (its pid stays the same)."""

from __future__ import annotations

import json
import threading

import httpx
import ollama
import pytest

from tests.server.conftest import live_server

SURROGATE = '"hi \\ud800"'  # valid JSON, but not text


@pytest.fixture(scope="module")
def server(smollm2_path):
    s = live_server("--parallel", "2", "--ctx", "2048", "--max-client-requests", "2")
    yield s
    s.stop()


def pid(server) -> int:
    return server.stats()["models"][0]["pid"]


def post(server, path: str, raw: str | bytes) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", content=raw, headers={"Content-Type": "application/json"}, timeout=60)


def error_param(r: httpx.Response) -> str | None:
    err = r.json()["error"]
    return err if isinstance(err, str) else err["param"]


@pytest.mark.parametrize("path,raw", [
    ("/v1/completions", '{"model": "smollm2-135m", "prompt": %s}' % SURROGATE),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": %s}]}' % SURROGATE),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": [{"type": "text", "text": %s}]}]}' % SURROGATE),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": [{"type": "text", "text": null}]}]}'),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}'),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "hi"}], "stop": [%s]}' % SURROGATE),
    ("/api/chat", '{"model": "smollm2-135m", "messages": [{"role": "user", "content": %s}]}' % SURROGATE),
    ("/api/generate", '{"model": "smollm2-135m", "prompt": %s}' % SURROGATE),
    ("/api/generate", '{"model": "smollm2-135m", "prompt": "hi", "system": %s}' % SURROGATE),
])
def test_text_that_is_not_text_gets_400_and_the_engine_stays_up(server, path, raw):
    before = pid(server)
    r = post(server, path, raw)
    assert r.status_code == 400, r.text
    assert pid(server) == before
    ok = httpx.post(f"{server.url}/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, timeout=60)
    assert ok.status_code == 200 and pid(server) == before


@pytest.mark.parametrize("raw,what", [
    ('{"prompt": "hi", "max_tokens": %s}' % ("9" * 5000), "not valid JSON"),
    ('{"prompt": "hi", "max_tokens": 1e999}', "max_tokens"),
    ('{"prompt": "hi", "temperature": NaN}', "not valid JSON"),
    ("[" * 40_000, "nested too deeply"),
    ("[" * 100_000, "100000 arrays and objects (at most 50000)"),
    ('{"prompt": "hi", "x": ' + "[" * 200 + "]" * 200 + "}", "nested too deeply"),
    (b'{"prompt": "\xff\xfe"}', "not valid JSON"),
])
def test_malformed_json_of_any_shape_is_400(server, raw, what):
    r = post(server, "/v1/completions", raw)
    assert r.status_code == 400, r.text
    assert what in json.dumps(r.json())


@pytest.mark.parametrize("options,param", [
    ({"repeat_last_n": 2**31 - 1}, "options.repeat_last_n"),
    ({"num_ctx": 2**31 - 1}, "options.num_ctx"),
    ({"num_batch": 2**31 - 1}, "options.num_batch"),
    ({"num_keep": 2**31 - 1}, "options.num_keep"),
    ({"top_k": 2**31 - 1}, "options.top_k"),
    ({"temperature": -1}, "options.temperature"),
    ({"mirostat": 7}, "options.mirostat"),
    ({"use_mmap": "yes"}, "options.use_mmap"),
    ({"stop": ["x" * 10_000]}, "options.stop[0]"),
])
def test_ollama_options_have_ranges(server, options, param):
    with pytest.raises(ollama.ResponseError) as e:
        ollama.Client(host=server.url, timeout=60).generate(model="smollm2-135m", prompt="hi", options=options)
    assert e.value.status_code == 400 and param in e.value.error


@pytest.mark.parametrize("body,param", [
    ({"prompt": "hi", "top_k": 2**40}, "top_k"),
    ({"prompt": "hi", "seed": 2**70}, "seed"),
    ({"prompt": [1, 2, 10**9]}, "prompt[2]"),
    ({"prompt": [-1]}, "prompt[0]"),
    ({"prompt": "hi", "stop": ["x" * 10_000]}, "stop[0]"),
    ({"prompt": "hi", "max_tokens": 2**40}, "max_tokens"),
])
def test_openai_numbers_have_ranges(server, body, param):
    r = httpx.post(f"{server.url}/v1/completions", json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_response_format_is_never_silently_ignored(oai):
    import json

    import openai

    r = oai.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "hi"}],
                                    max_tokens=24, temperature=0, response_format={"type": "json_object"})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": "hi"}],
                                    max_tokens=2, response_format={"type": "yaml"})
    assert e.value.param is not None and e.value.param.startswith("response_format")


def test_chat_completion_message_has_refusal_null(server):
    r = httpx.post(f"{server.url}/v1/chat/completions",
                   json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}, timeout=60)
    message = r.json()["choices"][0]["message"]
    assert "refusal" in message and message["refusal"] is None


def test_health_with_a_foreign_host_says_only_ok(server):
    r = httpx.get(f"{server.url}/health", headers={"Host": "attacker.example"})
    assert r.status_code == 200 and r.json() == {"status": "ok", "service": "hearth"}
    assert "pid" in json.dumps(server.health())  # the loopback caller still sees the details


def test_simple_gets_do_not_use_up_the_generation_quota(server):
    """A web page can hold simple GETs open (an <img> on the event feed, no Origin): with the
    per-client limit at 2, two of them must not stop the app's chat from the same address."""
    held, release = threading.Barrier(3), threading.Event()

    def hold() -> None:
        with httpx.stream("GET", f"{server.url}/hearth/downloads/events", timeout=60) as r:
            assert r.status_code == 200
            held.wait(30)
            release.wait(30)

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        held.wait(30)
        r = httpx.post(f"{server.url}/v1/completions", json={"prompt": "Hi", "max_tokens": 2}, timeout=60)
        assert r.status_code == 200, r.text
    finally:
        release.set()
        for t in threads:
            t.join(60)


def test_a_prompt_no_context_could_hold_is_refused_without_tokenizing_it(server):
    """2.4 MB of text cannot fit in 2,048 tokens whatever it tokenizes to: refused at once."""
    before = pid(server)
    r = httpx.post(f"{server.url}/v1/completions", json={"prompt": "hello " * 400_000, "max_tokens": 2}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded", r.text[:500]
    assert "bytes of text" in r.json()["error"]["message"]
    assert pid(server) == before
