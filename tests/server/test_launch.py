"""``hearth launch``: the printed settings, and ``--run`` starting a client whose settings reach a
live server (the clients are stand-in scripts on PATH that speak through the official SDKs)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from runtime import launch as hl
from runtime.self_command import hearth_argv
from runtime.server.launcher import ServiceProcess
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


# --- the clients' settings, checked on what the builders give (no service needed) ---------------

BASE = "http://127.0.0.1:5555"


def test_every_client_gets_the_address_model_and_key():
    for name in hl.CLIENTS:
        l = hl.BUILDERS[name](BASE, "some-model", "sk-hearth-1")
        shown = hl.describe(name, l, "some-model", True)
        assert f"{BASE}" in shown and "some-model" in shown and "sk-hearth-1" in shown, name
        assert "@config@" not in shown, name
        assert shown.splitlines()[0] == f"# {name} → Hearth, model some-model"


def test_qwen_code_settings():
    l = hl.qwen(BASE, "m1", None)
    assert l.program == "qwen" and l.args == ["--auth-type", "openai"]
    assert {k: l.env[k] for k in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL")} == {
        "OPENAI_BASE_URL": f"{BASE}/v1", "OPENAI_API_KEY": "hearth", "OPENAI_MODEL": "m1"}
    args, env = l.with_config("/some/settings.json")
    assert env["QWEN_CODE_SYSTEM_SETTINGS_PATH"] == "/some/settings.json"
    settings = json.loads(l.config)
    # no date and folder listing as the first message: the prompt's prefix stays the same
    assert settings["model"] == {"name": "m1", "skipStartupContext": True}
    assert settings["security"]["auth"]["selectedType"] == "openai"
    assert settings["memory"]["enableManagedAutoMemory"] is False  # no memory index in the system prompt
    assert settings["privacy"]["usageStatisticsEnabled"] is False
    assert settings["general"]["enableAutoUpdate"] is False


def test_continue_cli_config():
    import yaml

    l = hl.cn(BASE, 'odd "name": x', "sk-1")
    assert l.program == "cn" and l.args == ["--config", "@config@"] and l.config_needed
    config = yaml.safe_load(l.config)
    assert config["schema"] == "v1" and config["name"] == "Hearth"
    (model,) = config["models"]
    assert model["provider"] == "openai" and model["apiBase"] == f"{BASE}/v1" and model["apiKey"] == "sk-1"
    assert model["model"] == 'odd "name": x' and "chat" in model["roles"] and model["capabilities"] == ["tool_use"]
    shown = hl.describe("cn", l, "m", True)
    assert "cn --config ~/.continue/hearth.yaml" in shown  # unquoted: the shell expands ~


def test_aider_settings():
    l = hl.aider(BASE, "m1", None)
    args = l.args
    assert args[args.index("--model") + 1] == "openai/m1"
    assert args[args.index("--openai-api-base") + 1] == f"{BASE}/v1"
    assert {"--no-check-update", "--no-analytics", "--no-show-release-notes", "--no-show-model-warnings"} <= set(args)
    assert args[args.index("--map-refresh") + 1] == "files"
    assert l.env["OPENAI_API_KEY"] == "hearth" and l.env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    # the model described locally: Aider looks nothing up on the internet
    assert args[args.index("--model-metadata-file") + 1] == "@config@" and l.config_needed
    assert json.loads(l.config)["openai/m1"]["litellm_provider"] == "openai"
    assert "--model-metadata-file ~/.aider.model.metadata.json" in hl.describe("aider", l, "m1", True)


def test_gemini_cli_is_not_offered():
    assert "gemini" not in hl.CLIENTS
    assert "Gemini CLI" in hl.clients.__doc__


def test_cache_use_counts_the_later_full_prompts():
    from runtime.launch.check import cache_use
    from runtime.launch.proxy import Exchange

    def ex(prompt: int, cached: int) -> Exchange:
        body = json.dumps({"usage": {"prompt_tokens": prompt, "prompt_tokens_details": {"cached_tokens": cached}}})
        return Exchange("POST", "/v1/chat/completions", b"{}", status=200, answer=body.encode())

    # a side request (a title), the first full prompt (computed), then two that read it back
    gens = [ex(40, 0), ex(9000, 0), ex(9100, 8990), ex(9300, 9090)]
    assert cache_use(gens) == (18400, 18080)
    assert cache_use(gens[:2]) == (0, 0)


# --- --run with a config file, and --check, against a live service ----------------------------------

#: a stand-in for Qwen Code: reads the settings file it was given, and sends one chat request
FAKE_QWEN = """
import json, os, sys, openai
settings = json.load(open(os.environ["QWEN_CODE_SYSTEM_SETTINGS_PATH"]))
c = openai.OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"], max_retries=0)
r = c.chat.completions.create(model=os.environ["OPENAI_MODEL"], max_tokens=2, messages=[{"role": "user", "content": "Hi"}])
print(json.dumps({"args": sys.argv[1:], "settings": settings, "path": os.environ["QWEN_CODE_SYSTEM_SETTINGS_PATH"],
                  "tokens": r.usage.completion_tokens}))
"""

#: a stand-in client for --check: a version, then the same long prompt twice (the second read
#: from the prefix cache), and the file the task asks for
FAKE_CHECKED = """
import json, os, sys, pathlib, openai
if sys.argv[1:] == ["--version"]:
    print("9.8.7 (stand-in)")
    sys.exit(0)
c = openai.OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"], max_retries=0)
system = "You are a careful assistant. " + " ".join(f"Rule {i}: keep the answer short." for i in range(80))
model = os.environ.get("STAND_IN_MODEL") or os.environ["OPENAI_MODEL"]
for turn in ("Say hi.", "Say hi again."):
    r = c.chat.completions.create(model=model, max_tokens=1 if os.environ.get("STAND_IN_EXIT") else 2,
                                  messages=[{"role": "system", "content": system}, {"role": "user", "content": turn}])
pathlib.Path("hello.txt").write_text("hi\\n")
if os.environ.get("STAND_IN_LOG"):
    pathlib.Path(os.environ["STAND_IN_LOG"]).write_text(json.dumps({"args": sys.argv[1:], "cwd": os.getcwd()}))
if os.environ.get("STAND_IN_EXIT"):  # as Codex does when a reply ends at its token limit
    print("ERROR: Incomplete response returned, reason:", r.choices[0].finish_reason)
    sys.exit(int(os.environ["STAND_IN_EXIT"]))
"""


def test_run_gives_qwen_code_its_settings_in_a_file_that_is_removed_after(server, tmp_path):
    r = launch("qwen", "--port", str(server.port), "--run", "--", "-p", "x", path=_client(tmp_path, "qwen", FAKE_QWEN))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["args"] == ["--auth-type", "openai", "-p", "x"] and out["tokens"] == 2
    assert out["settings"]["model"] == {"name": "smollm2-135m", "skipStartupContext": True}
    assert not os.path.exists(out["path"])


def _check(server, tmp_path, source: str, **env: str) -> subprocess.CompletedProcess:
    bin_dir = _client(tmp_path, "qwen", source)
    full = {**os.environ, **env, "PATH": bin_dir + os.pathsep + os.environ["PATH"]}
    return subprocess.run([*hearth_argv(), "launch", "--check", "qwen", "--port", str(server.port), "--timeout", "120"],
                          capture_output=True, text=True, env=full, timeout=300)


def test_check_reports_a_client_that_works(server, tmp_path):
    r = _check(server, tmp_path, FAKE_CHECKED, STAND_IN_LOG=str(tmp_path / "log.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "client    qwen 9.8.7 (stand-in)" in out
    assert "result    worked (exit 0 in " in out
    assert "requests  2 served (2 generating), all 2xx" in out
    cache = next(l for l in out.splitlines() if l.startswith("cache"))
    assert cache.endswith(": high"), cache
    assert "task      hello.txt created" in out
    # it ran once, without questions, in a temporary directory that is gone now
    log = json.loads((tmp_path / "log.json").read_text())
    assert log["args"][:3] == ["--auth-type", "openai", "-p"] and "hello.txt" in log["args"][3]
    assert log["args"][4:6] == ["--approval-mode", "auto-edit"]
    assert not os.path.exists(log["cwd"]) and not (tmp_path / "hello.txt").exists()


def test_check_reports_a_failing_client_and_the_service_s_errors(server, tmp_path):
    r = _check(server, tmp_path, FAKE_CHECKED, STAND_IN_MODEL="no-such-model")
    assert r.returncode == 1
    out = r.stdout
    assert "result    FAILED (exit 1 in " in out
    assert "requests  1 served (1 generating), 1 not 2xx: /v1/chat/completions 404" in out
    assert "task      hello.txt not created" in out
    assert "NotFoundError" in out  # the client's own last lines come with the report


def test_check_counts_a_client_that_stops_on_a_reply_cut_at_its_limit(server, tmp_path):
    r = _check(server, tmp_path, FAKE_CHECKED, STAND_IN_EXIT="1")
    out = r.stdout  # the stand-in's last reply was cut at its max_tokens = 1, and it exited 1
    assert r.returncode == 0, out + r.stderr
    assert "result    worked (exit 1 in " in out and "all 2xx" in out
    assert "note      the client stopped with exit 1 because the model's last reply was cut" in out


def test_cut_short_reads_every_wire_format():
    from runtime.launch.proxy import Exchange

    def cut(*docs: dict) -> bool:
        body = "\n".join("data: " + json.dumps(d) for d in docs) + "\ndata: [DONE]\n"
        return Exchange("POST", "/x", b"{}", status=200, answer=body.encode()).cut_short()

    assert cut({"choices": [{"index": 0, "finish_reason": "length"}]})
    assert not cut({"choices": [{"index": 0, "finish_reason": "stop"}]})
    assert cut({"type": "response.incomplete", "response": {"status": "incomplete",
                                                            "incomplete_details": {"reason": "max_output_tokens"}}})
    assert not cut({"type": "response.completed", "response": {"status": "completed", "incomplete_details": None}})
    assert cut({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}})
    assert cut({"id": "msg", "type": "message", "stop_reason": "max_tokens"})
    assert not cut({"type": "message_delta", "delta": {"stop_reason": "end_turn"}})
    assert cut({"model": "m", "done": True, "done_reason": "length"})
    assert not cut({"model": "m", "done": True, "done_reason": "stop"}, ["not a dict"])  # type: ignore[arg-type]


def test_check_without_a_service_says_so(tmp_path):
    from runtime.server.launcher import free_port

    r = subprocess.run([*hearth_argv(), "launch", "--check", "aider", "--port", str(free_port())],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "no Hearth service answers" in r.stderr


# --- --check with the real clients (minutes each, npm and PyPI): HEARTH_TEST_AGENT_CLIENTS=1 -------

AGENT_CACHE = Path(os.environ.get("HEARTH_AGENT_CACHE", Path.home() / ".cache" / "hearth-test-agents"))
NPM_PACKAGES = {"claude": "@anthropic-ai/claude-code", "codex": "@openai/codex", "opencode": "opencode-ai",
                "qwen": "@qwen-code/qwen-code", "cn": "@continuedev/cli"}
real_clients = pytest.mark.skipif(not os.environ.get("HEARTH_TEST_AGENT_CLIENTS"),
                                  reason="the real agent clients run with HEARTH_TEST_AGENT_CLIENTS=1 (minutes, npm)")


def _installed(client: str) -> str:
    """The folder holding the client's program, installed once into the cache directory."""
    from filelock import FileLock

    AGENT_CACHE.mkdir(parents=True, exist_ok=True)
    with FileLock(str(AGENT_CACHE / ".install.lock")):
        if client == "aider":  # a virtual environment of its own: its pins are not Hearth's
            bin_dir = AGENT_CACHE / "aider-venv" / "bin"
            if not (bin_dir / "aider").exists():
                subprocess.run([sys.executable, "-m", "venv", str(bin_dir.parent)], check=True, timeout=300)
                done = subprocess.run([str(bin_dir / "pip"), "install", "-q", "aider-chat"], capture_output=True,
                                      text=True, timeout=1800)
                if done.returncode != 0:
                    pytest.skip(f"pip could not install aider-chat: {done.stderr.strip()[-300:]}")
            return str(bin_dir)
        bin_dir = AGENT_CACHE / "node_modules" / ".bin"
        if not (bin_dir / client).exists():
            npm = shutil.which("npm")
            if npm is None:
                pytest.skip("npm is not installed (the agent clients are npm packages)")
            done = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--prefix", str(AGENT_CACHE),
                                   NPM_PACKAGES[client]], capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                pytest.skip(f"npm could not install {NPM_PACKAGES[client]}: {done.stderr.strip()[-300:]}")
        return str(bin_dir)


@pytest.fixture(scope="module")
def agent_server(gemma_path):
    s = ServiceProcess("--model", "gemma-3-270m", "--ctx", "32768", "--parallel", "2", "--max-tokens-limit", "64",
                       "--cache-ram", "4096").wait_ready(300)
    yield s
    s.stop()


@real_clients
@pytest.mark.timeout(1800)  # the client reads a long prompt on 2 cores (the check itself allows 1200 s)
@pytest.mark.parametrize("client", list(hl.CLIENTS))
def test_check_runs_the_real_client(client, agent_server, tmp_path):
    bin_dir = _installed(client)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"], "HOME": str(tmp_path),
           "CODEX_HOME": str(tmp_path / ".codex")}
    (tmp_path / ".codex").mkdir()
    r = subprocess.run([*hearth_argv(), "launch", "--check", client, "--port", str(agent_server.port),
                        "--model", "gemma-3-270m", "--timeout", "1200"],
                       capture_output=True, text=True, env=env, timeout=1500)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "result    worked" in r.stdout and ", all 2xx" in r.stdout
    assert "LOW" not in r.stdout, r.stdout  # the later requests, if any, read their prompt from the cache
