"""The Ollama-compatible API through the official ``ollama`` client, against a live server."""

from __future__ import annotations

import json
import time

import httpx
import ollama
import pytest

from tests.server.conftest import live_server

GREEDY = {"temperature": 0, "num_predict": 12}


@pytest.fixture(scope="module")
def server(smollm2_path):
    s = live_server("--parallel", "2", "--ctx", "2048")
    yield s
    s.stop()


@pytest.fixture()
def client(server):
    return ollama.Client(host=server.url, timeout=120)


def test_chat_non_streaming_and_streaming_agree(client):
    messages = [{"role": "user", "content": "Name three colors."}]
    full = client.chat(model="smollm2-135m", messages=messages, options=GREEDY)
    assert full.done and full.message.role == "assistant" and full.message.content
    assert full.done_reason in ("stop", "length")
    assert full.prompt_eval_count > 5 and 0 < full.eval_count <= 12
    assert full.total_duration >= full.eval_duration > 0
    parts = list(client.chat(model="smollm2-135m", messages=messages, options=GREEDY, stream=True))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    assert "".join(p.message.content for p in parts) == full.message.content
    assert parts[-1].eval_count == full.eval_count and parts[-1].done_reason == full.done_reason


def test_generate_stream_and_options(client):
    r = client.generate(model="smollm2-135m", prompt="1, 2, 3, 4,", raw=True, options={**GREEDY, "stop": ["7"]})
    assert r.response.startswith(" 5") and "7" not in r.response and r.done_reason == "stop"
    streamed = "".join(p.response for p in client.generate(
        model="smollm2-135m:latest", prompt="1, 2, 3, 4,", raw=True, options={**GREEDY, "stop": ["7"]}, stream=True))
    assert streamed == r.response
    capped = client.generate(model="smollm2-135m", prompt="Tell me a story.", options={"num_predict": 3})
    assert capped.eval_count == 3 and capped.done_reason == "length"


def test_seeded_sampling_is_reproducible(client):
    kw = dict(model="smollm2-135m", prompt="Once upon a time", options={"temperature": 1.0, "seed": 11, "num_predict": 12})
    assert client.generate(**kw).response == client.generate(**kw).response


def test_list_show_ps_version(client, server):
    names = {m.model for m in client.list().models}
    assert {"smollm2-135m:latest", "gemma-3-270m:latest"} <= names
    smol = next(m for m in client.list().models if m.model == "smollm2-135m:latest")
    assert smol.size > 50_000_000 and smol.details.format == "gguf" and smol.details.quantization_level == "Q4_1"
    info = client.show("smollm2-135m")
    assert info.modelinfo["general.architecture"] == "llama"
    assert "<|im_start|>" in info.template and info.details.parameter_size == "135M"
    client.generate(model="smollm2-135m", prompt="Hi", options={"num_predict": 1})
    running = client.ps().models
    assert [m.model for m in running] == ["smollm2-135m:latest"]
    assert running[0].size > 0 and running[0].expires_at is not None
    assert httpx.get(f"{server.url}/api/version").json()["version"]


def test_keep_alive_zero_unloads_and_next_request_reloads(client, server):
    client.generate(model="smollm2-135m", prompt="Hi", options={"num_predict": 1})
    r = client.generate(model="smollm2-135m", keep_alive=0)
    assert r.done_reason == "unload"
    assert client.ps().models == [] and server.health()["engine"]["state"] == "idle"
    assert client.generate(model="smollm2-135m", prompt="Hi", options={"num_predict": 2}).eval_count == 2
    assert [m.model for m in client.ps().models] == ["smollm2-135m:latest"]


def test_idle_model_unloads_after_its_keep_alive(client, server):
    client.chat(model="smollm2-135m", messages=[{"role": "user", "content": "Hi"}],
                options={"num_predict": 2}, keep_alive="1s")
    assert client.ps().models, "loaded right after the request"
    deadline = time.monotonic() + 30
    while client.ps().models and time.monotonic() < deadline:
        time.sleep(0.2)
    assert client.ps().models == []
    r = client.chat(model="smollm2-135m", messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 2})
    assert r.eval_count == 2
    assert client.ps().models[0].expires_at.timestamp() > time.time() + 200  # the service default again


def test_load_only_chat(client):
    r = client.chat(model="smollm2-135m", messages=[])
    assert r.done and r.done_reason == "load" and r.message.content == ""


@pytest.mark.parametrize("body, status, needle", [
    ({"messages": [{"role": "user", "content": "hi"}]}, 400, "'model' is required"),
    ({"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}, 404, "no-such-model"),
    ({"model": "smollm2-135m", "messages": "hi"}, 400, "'messages'"),
    ({"model": "smollm2-135m", "messages": [{"role": "user", "content": "hi"}], "options": {"temperature": "hot"}},
     400, "options.temperature"),
    ({"model": "smollm2-135m", "messages": [], "keep_alive": "soon"}, 400, "keep_alive"),
    ({"model": "smollm2-135m", "messages": [{"role": "user", "content": "hi", "images": ["aGk="]}]}, 400, "images"),
    ({"model": "smollm2-135m", "messages": [{"role": "user", "content": "hi"}], "format": "yaml"}, 400, "format"),
    ({"model": "smollm2-135m", "messages": [{"role": "user", "content": "hi"}], "format": {"type": "foo"}}, 400, "format"),
])
def test_bad_input_gets_4xx_in_ollama_format(server, body, status, needle):
    r = httpx.post(f"{server.url}/api/chat", json=body)
    assert r.status_code == status
    err = r.json()["error"]
    assert isinstance(err, str) and needle in err
    assert server.health()["engine"]["state"] in ("running", "idle")


def test_client_raises_response_error(client):
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 404 and "no-such-model" in e.value.error


def test_ndjson_framing(server):
    body = {"model": "smollm2-135m", "prompt": "Hi", "options": {"num_predict": 4}}
    with httpx.stream("POST", f"{server.url}/api/generate", json=body) as r:
        assert r.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(x) for x in r.iter_lines() if x]
    assert [x["done"] for x in lines] == [False] * (len(lines) - 1) + [True]
    assert lines[-1]["eval_count"] == 4 and lines[-1]["response"] == ""


def test_pull_list_delete_against_the_loopback_hub(loopback_hub, smollm2_path, tmp_path):
    import os

    from runtime.server.launcher import ServiceProcess
    from tests.store.hubfiles import FILE, REPO, publish

    data = publish(loopback_hub, tmp_path)
    s = ServiceProcess("--parallel", "1", "--ctx", "1024", env=dict(os.environ)).wait_ready()
    try:
        c = ollama.Client(host=s.url, timeout=120)
        progress = list(c.pull(f"{REPO}:Q4_K_M", stream=True))
        assert progress[0].status == "pulling manifest" and progress[-1].status == "success"
        files = [p for p in progress if p.digest]
        assert files and all(p.digest.startswith("sha256:") for p in files)
        assert files[-1].total == len(data) and files[-1].completed == len(data)
        done = [p.completed for p in files]
        assert done == sorted(done)
        name = f"{REPO}/{FILE}"
        assert name in {m.model for m in c.list().models}
        assert c.show(name).details.format == "gguf"
        assert c.pull(f"{REPO}:Q4_K_M").status == "success"  # present already: no second download
        assert loopback_hub.gets(REPO, FILE) == 1
        assert c.pull("smollm2-135m").status == "success"  # ships with Hearth
        with pytest.raises(ollama.ResponseError) as e:
            c.pull("hearth-test/No-Such-Repo")
        assert e.value.status_code == 404
        assert c.delete(name).status == "success"
        assert name not in {m.model for m in c.list().models}
        with pytest.raises(ollama.ResponseError) as e:
            c.delete(name)
        assert e.value.status_code == 404
        with pytest.raises(ollama.ResponseError) as e:
            c.delete("smollm2-135m")
        assert e.value.status_code == 400
    finally:
        s.stop()
