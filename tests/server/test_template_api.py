"""A model's chat template in a real service: ``--chat-template-file`` for the default model (the
prompt and the output contract change), the prompt ``hearth template`` prints is the one served,
and the per-model override's round trip through ``/hearth/models/{id}/template``."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import live_server

TEMPLATES = Path(__file__).parents[1] / "chat" / "templates"
HERMES = TEMPLATES / "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja"
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the weather in Paris?"}]
CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def server(smollm2_path, gemma_path):
    s = live_server("--chat-template-file", str(HERMES), "--parallel", "2", "--ctx", "2048")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.url, timeout=300) as c:
        yield c


@pytest.fixture()
def confirmed(data_dir) -> dict[str, str]:
    from runtime.import_confirm import CONFIRM_HEADER, load_token

    token = load_token(data_dir)
    assert token
    return {CONFIRM_HEADER: token}


def printed_prompt(tmp_path: Path, model: str, *args: str, tools: bool = False) -> str:
    (tmp_path / "m.json").write_text(json.dumps(MESSAGES))
    (tmp_path / "t.json").write_text(json.dumps(TOOLS))
    extra = ["--tools", str(tmp_path / "t.json")] if tools else []
    r = subprocess.run([sys.executable, "-m", "runtime.cli", "template", model, "--messages", str(tmp_path / "m.json"),
                        *extra, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def prompt_tokens(http: httpx.Client, prompt: str, model: str = "smollm2-135m") -> int:
    r = http.post("/v1/completions", json={"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens"]


def chat(http: httpx.Client, **body) -> dict:
    r = http.post("/v1/chat/completions", json={"model": "smollm2-135m", "messages": MESSAGES, "temperature": 0,
                                                "max_tokens": 48, **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_chat_template_file_changes_the_prompt_and_the_contract(server, http, tmp_path):
    # a forced call comes back structured, and the worker derived Hermes's call syntax
    reply = chat(http, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    calls = reply["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["get_weather"]
    assert "city" in json.loads(calls[0]["function"]["arguments"])
    t = http.get("/hearth/models/smollm2-135m/template").json()
    assert t["origin"] == "file" and t["template"] == HERMES.read_text()
    assert t["contract"]["calls"]["call_start"] == "<tool_call>\n" and t["contract"]["native_tools"] is True
    # the prompt served is the one `hearth template --template` prints, not the model's own
    served = chat(http, tools=TOOLS, max_tokens=1)["usage"]["prompt_tokens"]
    hermes = printed_prompt(tmp_path, "smollm2-135m", "--template", str(HERMES), tools=True)
    own = printed_prompt(tmp_path, "smollm2-135m", tools=True)
    assert "<tools>" in hermes and hermes != own
    assert prompt_tokens(http, hermes) == served != prompt_tokens(http, own)


def test_the_printed_prompt_is_the_one_served(server, http, tmp_path):
    prompt = printed_prompt(tmp_path, "smollm2-135m", "--template", str(HERMES))
    # a few tokens: a prompt restored from the cache and one computed anew may part at a near tie
    # later on (llama.cpp's numerics depend on the batch's shape)
    answer = chat(http, max_tokens=8)
    assert answer["usage"]["prompt_tokens"] == prompt_tokens(http, prompt)
    r = http.post("/v1/completions", json={"model": "smollm2-135m", "prompt": prompt, "max_tokens": 8,
                                           "temperature": 0})
    assert r.json()["choices"][0]["text"] == answer["choices"][0]["message"]["content"]


def test_an_override_round_trip(server, http, tmp_path, data_dir, confirmed):
    path = "/hearth/models/gemma-3-270m/template"
    before = http.get(path).json()
    assert (before["template"], before["origin"], before["bos"]) == (None, "model", "<bos>")
    # the user's act only
    r = http.put(path, json={"template": CHATML})
    assert r.status_code == 403 and r.json()["error"]["code"] == "template_not_confirmed"
    # a template that does not render is refused, saying why; nothing is stored
    for broken, why in (("{% for m in messages %}{{ m.content }", "not valid Jinja"),
                        ("<|im_start|>assistant\n", "leaves the conversation out"),
                        ("{{ raise_exception('no system role') }}", "no system role")):
        r = http.put(path, json={"template": broken}, headers=confirmed)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["code"] == "invalid_chat_template" and error["param"] == "template" and why in error["message"]
    assert http.get(path).json()["origin"] == "model"
    r = http.put(path, json={"template": CHATML}, headers=confirmed)
    assert r.status_code == 200, r.text
    assert (r.json()["origin"], r.json()["template"]) == ("stored", CHATML)
    stored = data_dir / "templates" / "gemma-3-270m.jinja"
    assert stored.read_text() == CHATML and stat.S_IMODE(stored.stat().st_mode) == 0o600
    try:
        # the worker loads the model with it: the prompt is ChatML, the contract derived from it
        served = http.post("/v1/chat/completions", json={"model": "gemma-3-270m", "messages": MESSAGES,
                                                         "max_tokens": 1})
        assert served.status_code == 200, served.text
        printed = printed_prompt(tmp_path, "gemma-3-270m")  # the CLI reads the same override
        assert printed.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
        assert served.json()["usage"]["prompt_tokens"] == prompt_tokens(http, printed, "gemma-3-270m")
        loaded = http.get(path).json()
        assert loaded["contract"]["noise"] == ["<|im_start|>assistant", "<|im_end|>"]  # the header, the turn end
    finally:
        r = http.delete(path, headers=confirmed)
    assert r.status_code == 200 and r.json()["removed"] is True and r.json()["origin"] == "model"
    assert "gemma-3-270m" in r.json()["unloaded"]  # idle: unloaded, to load again with its own
    assert not stored.exists()
    assert "gemma-3-270m" in {m["id"] for m in http.get("/v1/models").json()["data"]}  # the model itself stays
    assert http.get("/hearth/models/no-such-model/template").status_code == 404


def test_serve_refuses_a_template_file_that_does_not_render(tmp_path):
    (tmp_path / "t.jinja").write_text("{{ raise_exception('not for chats') }}")
    r = subprocess.run([sys.executable, "-m", "runtime.cli", "serve", "--port", "1", "--chat-template-file",
                        str(tmp_path / "t.jinja")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--chat-template-file: the model's chat template refused the conversation: not for chats" in r.stderr
    assert f"hearth template MODEL --template {tmp_path / 't.jinja'}" in r.stderr
