"""``hearth launch``: the printed settings, and ``--run`` starting a client whose settings reach a
live server (the clients are stand-in scripts on PATH that speak through the official SDKs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib

import pytest

from runtime.self_command import hearth_argv
from tests.server.conftest import live_server

#: a stand-in for Claude Code: sends one message with the settings it was started with
FAKE_CLAUDE = """
import os, sys, anthropic
c = anthropic.Anthropic(base_url=os.environ["ANTHROPIC_BASE_URL"], auth_token=os.environ["ANTHROPIC_AUTH_TOKEN"],
                        api_key=None, max_retries=0, timeout=120)
m = c.messages.create(model=os.environ["ANTHROPIC_MODEL"], max_tokens=3, messages=[{"role": "user", "content": "Hi"}])
print("ARGS", sys.argv[1:], "KEY-SET", "ANTHROPIC_API_KEY" in os.environ, "REPLY", m.usage.output_tokens)
"""
#: a stand-in for Codex: prints its arguments (the test reads the provider from them)
FAKE_CODEX = "import json, sys; print(json.dumps(sys.argv[1:]))"


@pytest.fixture(scope="module")
def server(smollm2_path):
    s = live_server("--parallel", "1", "--ctx", "1024")
    yield s
    s.stop()


def launch(*args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANTHROPIC_API_KEY": "sk-ant-from-the-shell"}
    if path is not None:
        env["PATH"] = path + os.pathsep + env["PATH"]
    return subprocess.run([*hearth_argv(), "launch", *args], capture_output=True, text=True, env=env, timeout=120)


def _client(tmp_path, name: str, source: str) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text(f"#!{sys.executable}\n{source}")
    script.chmod(0o755)
    return str(bin_dir)


def test_prints_the_settings_with_the_loaded_model(server):
    port = str(server.port)
    out = launch("claude", "--port", port).stdout
    assert f"export ANTHROPIC_BASE_URL=http://127.0.0.1:{port}" in out
    assert "export ANTHROPIC_MODEL=smollm2-135m" in out and "ANTHROPIC_AUTH_TOKEN=" in out
    assert "no Hearth service" not in out
    codex = launch("codex", "--port", port).stdout
    config = tomllib.loads(codex.split("config.toml:\n", 1)[1])
    assert config["model"] == "smollm2-135m" and config["model_provider"] == "hearth"
    assert config["model_providers"]["hearth"] == {"name": "Hearth", "base_url": f"http://127.0.0.1:{port}/v1",
                                                   "wire_api": "responses"}
    opencode = json.loads(launch("opencode", "--port", port).stdout.split("opencode.json:\n", 1)[1])
    assert opencode["model"] == "hearth/smollm2-135m"
    assert opencode["provider"]["hearth"]["options"]["baseURL"] == f"http://127.0.0.1:{port}/v1"


def test_without_a_service_it_says_so_and_uses_the_default_model():
    from runtime.server.launcher import free_port

    out = launch("claude", "--port", str(free_port())).stdout
    assert "no Hearth service answers" in out and "ANTHROPIC_MODEL=smollm2-135m" in out


def test_run_starts_claude_with_settings_that_work(server, tmp_path):
    bin_dir = _client(tmp_path, "claude", FAKE_CLAUDE)
    r = launch("claude", "--port", str(server.port), "--run", "--", "-p", "hello", path=bin_dir)
    assert r.returncode == 0, r.stderr
    assert "ARGS ['-p', 'hello'] KEY-SET False REPLY 3" in r.stdout


def test_run_starts_codex_with_a_responses_provider_that_works(server, tmp_path):
    import openai

    r = launch("codex", "--port", str(server.port), "--run", path=_client(tmp_path, "codex", FAKE_CODEX))
    args = json.loads(r.stdout)
    assert args[:2] == ["-c", "model_provider=hearth"] and args[-2:] == ["-m", "smollm2-135m"]
    provider = tomllib.loads(args[3].replace("model_providers.hearth=", "p = ", 1))["p"]
    assert provider["wire_api"] == "responses"
    reply = openai.OpenAI(base_url=provider["base_url"], api_key="unused", max_retries=0).responses.create(
        model=args[-1], input="Hi", max_output_tokens=2)
    assert reply.usage.output_tokens == 2


def test_run_without_the_client_on_path_is_a_clear_error(tmp_path):
    env_path = str(tmp_path)  # only an empty folder in front; opencode is not installed here
    r = subprocess.run([*hearth_argv(), "launch", "opencode", "--run"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PATH": env_path + os.pathsep + os.path.dirname(sys.executable)})
    assert r.returncode == 127 and "`opencode` is not on PATH" in r.stderr and "npm install" in r.stderr
