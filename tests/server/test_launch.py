"""``hearth launch``: the model it picks for each client (one whose context holds the client's first
request and whose template does tool calls, loaded with a larger context where its default is too
small, else the pull advice), the printed settings (pasted into a shell as they are), and ``--run``
starting a client whose settings reach a live server (the clients are stand-in scripts on PATH that
speak through the official SDKs)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from runtime import launch as hl
from runtime.launch.clients import REPLY_ROOM
from runtime.launch.model_choice import PLAIN_SUGGESTION, NoFit, choose, context_to_load
from runtime.launch.service import Known
from runtime.self_command import hearth_argv
from runtime.server.launcher import ServiceProcess
from runtime.store.catalog import agent_models

#: a stand-in for Claude Code: sends one message with the settings it was started with
FAKE_CLAUDE = """
import os, sys, anthropic
c = anthropic.Anthropic(base_url=os.environ["ANTHROPIC_BASE_URL"], auth_token=os.environ["ANTHROPIC_AUTH_TOKEN"],
                        api_key=None, max_retries=0, timeout=120)
m = c.messages.create(model=os.environ["ANTHROPIC_MODEL"], max_tokens=3, messages=[{"role": "user", "content": "Hi"}])
print("ARGS", sys.argv[1:], "KEY-SET", "ANTHROPIC_API_KEY" in os.environ, "REPLY", m.usage.output_tokens,
      "IDLE", os.environ["CLAUDE_STREAM_IDLE_TIMEOUT_MS"])
"""
#: a stand-in for Codex: prints its arguments (the test reads the provider from them)
FAKE_CODEX = "import json, sys; print(json.dumps(sys.argv[1:]))"


class Service(ServiceProcess):
    """A service with a data directory of its own: the models other tests put in the shared one
    would change which model launch picks."""

    def __init__(self, data: Path, *args: str) -> None:
        self.data = data
        super().__init__(*args, env={**os.environ, "HEARTH_DATA_DIR": str(data)})


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``hearth serve`` as it comes: SmolLM2 (8k context, no tools in its template) loaded, Gemma 3
    270M (a base model) beside it."""
    s = Service(tmp_path_factory.mktemp("launch-data"), "--parallel", "1").wait_ready()
    yield s
    s.stop()


def launch(*args: str, path: str | None = None, data: Path | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "ANTHROPIC_API_KEY": "sk-ant-from-the-shell"}
    if data is not None:
        full["HEARTH_DATA_DIR"] = str(data)
    if path is not None:
        full["PATH"] = path + os.pathsep + full["PATH"]
    return subprocess.run([*hearth_argv(), "launch", *args], capture_output=True, text=True, env=full, timeout=300)


def on(server: Service, client: str, *args: str, path: str | None = None) -> subprocess.CompletedProcess:
    """``hearth launch CLIENT ARGS`` against ``server``."""
    return launch(client, "--port", str(server.port), *args, path=path, data=server.data)


def _client(tmp_path, name: str, source: str) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text(f"#!{sys.executable}\n{source}")
    script.chmod(0o755)
    return str(bin_dir)


def _uncommented(lines: list[str]) -> str:
    return "\n".join(line[2:] if line.startswith("# ") else line.removeprefix("#") for line in lines) + "\n"


def printed_config(out: str, path: str) -> str:
    """The config file's content in printed settings: the comment lines after ``# ... PATH:``."""
    return _uncommented(out.split(f"{path}:\n", 1)[1].splitlines())


def test_a_plain_service_without_a_model_that_fits_says_what_to_pull(server):
    r = on(server, "claude")
    assert r.returncode == 1 and r.stdout == "", r.stdout
    err = r.stderr
    assert "Traceback" not in err
    assert "no model here can serve Claude Code: its first request is about 20,070 tokens" in err
    assert "smollm2-135m  its context is 8,192 tokens" in err
    assert "gemma-3-270m  no chat template (a base model)" in err
    # one of the catalog's agent models, whose context holds the prompt, planned for this machine
    # by the service
    pull = next(line.split()[-1] for line in err.splitlines() if line.strip().startswith("hearth pull "))
    entry = {e.id: e for e in agent_models()}[pull]
    assert entry.context_length >= 20_070 and entry.tools, err
    # Codex's prompt is shorter, but SmolLM2's template still renders no tools
    codex = on(server, "codex").stderr
    assert "smollm2-135m  its context is 8,192 tokens" in codex and f"hearth pull {pull}" in codex


def test_with_nothing_loaded_the_choice_takes_the_service_s_default_model():
    """Launch passes the model in use, else /health's default_model, as the one used last: of two
    models that serve the client as well, an idle service's default is taken."""
    aider = hl.CLIENTS["aider"]
    assert choose(aider, [known("small", 8192), known("other", 8192)], None, None, "other").model == "other"
    assert choose(aider, [known("small", 8192), known("other", 8192)], None, None, "small").model == "small"


def test_aider_sends_no_tools_and_gets_the_loaded_model(server):
    health = server.health()["engine"]
    assert health["default_model"] == "smollm2-135m" and health["model"] in (None, "smollm2-135m")
    r = on(server, "aider")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[:2] == [
        "# aider → Hearth, model smollm2-135m",
        "# context 8,192 tokens (Aider's first request: about 742); no tool calls in its chat template"]
    assert "--model openai/smollm2-135m" in r.stdout
    assert json.loads(printed_config(r.stdout, "~/.aider.model.metadata.json"))[
        "openai/smollm2-135m"]["max_input_tokens"] == 8192


def test_a_model_named_with_model_is_used_and_its_limits_named(server):
    port = str(server.port)
    r = on(server, "claude", "--model", "smollm2-135m")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert f"export ANTHROPIC_BASE_URL=http://127.0.0.1:{port}" in out
    assert "export ANTHROPIC_MODEL=smollm2-135m" in out and "ANTHROPIC_AUTH_TOKEN=" in out
    assert "# context 8,192 tokens (Claude Code's first request: about 20,070)" in out
    assert "no Hearth service" not in out
    assert "warning: smollm2-135m: its context is 8,192 tokens" in r.stderr
    codex = on(server, "codex", "--model", "smollm2-135m").stdout
    config = tomllib.loads(printed_config(codex, "config.toml"))
    assert config["model"] == "smollm2-135m" and config["model_provider"] == "hearth"
    assert config["model_context_window"] == 8192
    assert config["model_providers"]["hearth"] == {"name": "Hearth", "base_url": f"http://127.0.0.1:{port}/v1",
                                                   "wire_api": "responses"}
    opencode = json.loads(printed_config(on(server, "opencode", "--model", "smollm2-135m").stdout, "opencode.json"))
    assert opencode["model"] == "hearth/smollm2-135m"
    assert opencode["provider"]["hearth"]["options"]["baseURL"] == f"http://127.0.0.1:{port}/v1"
    assert opencode["provider"]["hearth"]["models"]["smollm2-135m"]["limit"] == {"context": 8192, "output": 2048}


def test_without_a_service_it_says_so_and_picks_from_the_local_store(server):
    from runtime.server.launcher import free_port

    port = str(free_port())
    r = launch("aider", "--port", port, data=server.data)
    assert r.returncode == 0, r.stderr
    assert "no Hearth service answers" in r.stdout and "--model openai/smollm2-135m" in r.stdout
    assert "# start the service with `hearth serve --model smollm2-135m --ctx 8192`" in r.stdout
    # nothing here holds Claude Code's prompt with tools: the advice, without the machine's plan
    r = launch("claude", "--port", port, data=server.data)
    assert r.returncode == 1 and r.stdout == "" and "Traceback" not in r.stderr
    assert f"hearth pull {PLAIN_SUGGESTION}" in r.stderr and f"hearth fit {PLAIN_SUGGESTION} --ctx 32768" in r.stderr


def test_run_starts_claude_with_settings_that_work(server, tmp_path):
    bin_dir = _client(tmp_path, "claude", FAKE_CLAUDE)
    r = on(server, "claude", "--model", "smollm2-135m", "--run", "--", "-p", "hello", path=bin_dir)
    assert r.returncode == 0, r.stderr
    assert "ARGS ['-p', 'hello'] KEY-SET False REPLY 3 IDLE 3600000" in r.stdout


def test_run_starts_codex_with_a_responses_provider_that_works(server, tmp_path):
    import openai

    r = on(server, "codex", "--model", "smollm2-135m", "--run", path=_client(tmp_path, "codex", FAKE_CODEX))
    args = json.loads(r.stdout)
    assert args[:2] == ["-c", "model_provider=hearth"] and args[-2:] == ["-m", "smollm2-135m"]
    assert args[4:6] == ["-c", "model_context_window=8192"]
    provider = tomllib.loads(args[3].replace("model_providers.hearth=", "p = ", 1))["p"]
    assert provider["wire_api"] == "responses"
    reply = openai.OpenAI(base_url=provider["base_url"], api_key="unused", max_retries=0).responses.create(
        model=args[-1], input="Hi", max_output_tokens=2)
    assert reply.usage.output_tokens == 2


def test_output_cut_short_by_head_ends_quietly(server):
    port = str(server.port)
    env = {**os.environ, "HEARTH_DATA_DIR": str(server.data)}
    r = subprocess.run(["sh", "-c", f"{' '.join(hearth_argv())} launch codex --model smollm2-135m --port {port} "
                                    "| head -1"], capture_output=True, text=True, timeout=120, env=env)
    assert r.stdout == "# codex → Hearth, model smollm2-135m\n", r.stdout
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr
    # the same without a race: the reader has gone before the first write
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run([*hearth_argv(), "launch", "codex", "--model", "smollm2-135m", "--port", port],
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=120, env=env)
    finally:
        os.close(write)
    assert done.returncode == 0 and "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr


def test_run_without_the_client_on_path_is_a_clear_error(tmp_path):
    env_path = str(tmp_path)  # only an empty folder in front; opencode is not installed here
    r = subprocess.run([*hearth_argv(), "launch", "opencode", "--model", "m", "--run"], capture_output=True, text=True,
                       timeout=60,
                       env={**os.environ, "PATH": env_path + os.pathsep + os.path.dirname(sys.executable)})
    assert r.returncode == 127 and "`opencode` is not on PATH" in r.stderr and "npm install" in r.stderr


# --- the clients' settings, checked on what the builders give (no service needed) ---------------

BASE = "http://127.0.0.1:5555"


def test_every_client_gets_the_address_model_and_key():
    for name in hl.CLIENTS:
        l = hl.BUILDERS[name](BASE, "some-model", "sk-hearth-1", None)
        shown = hl.describe(name, l, "some-model", True)
        assert f"{BASE}" in shown and "some-model" in shown and "sk-hearth-1" in shown, name
        assert "@config@" not in shown, name
        assert shown.splitlines()[0] == f"# {name} → Hearth, model some-model"


def test_the_printed_settings_paste_into_a_shell(tmp_path):
    """Every line of the output is a comment or a shell command that works: pasted whole into a
    shell (here ``sh -e``, which stops at the first failing line), it sets the variables and starts
    the client (a stand-in that reports what it got)."""
    stub = ("import json, os, sys; print(json.dumps({'args': sys.argv[1:], "
            "'env': {k: v for k, v in os.environ.items() if k.isupper()}}))")
    bin_dir = _client(tmp_path, "stub", stub)
    for name, spec in hl.CLIENTS.items():
        given = spec.build(BASE, "some-model", "sk-hearth-1", 32768)
        os.symlink(Path(bin_dir) / "stub", Path(bin_dir) / given.program)
        notes = ["context 32,768 tokens; tool calls", "loaded some-model:\n  curl -X POST x\nor: hearth serve"]
        shown = hl.describe(name, given, "some-model", True, notes)
        assert subprocess.run(["sh", "-n"], input=shown, text=True, capture_output=True).returncode == 0, name
        lines = [line for line in shown.splitlines() if line and not line.startswith("#")]
        assert all(line.startswith(("unset ", "export ", given.program + " ")) or line == given.program
                   for line in lines), lines
        env = {"PATH": bin_dir + os.pathsep + os.environ["PATH"], "HOME": str(tmp_path), "ANTHROPIC_API_KEY": "x"}
        r = subprocess.run(["sh", "-e"], input=shown, text=True, capture_output=True, env=env, timeout=60)
        assert r.returncode == 0, (name, r.stderr)
        got = json.loads(r.stdout)
        assert {k: v for k, v in given.env.items() if "@config@" not in v}.items() <= got["env"].items(), name
        assert not set(given.unset) & set(got["env"]), name
        config = str(tmp_path / (given.config_path or "").removeprefix("~/"))  # the shell expanded its ~
        assert got["args"] == [a.replace("@config@", config) for a in given.args], name


def test_codex_gets_the_model_s_context():
    given = hl.codex(BASE, "m1", None, 16384)
    assert given.args[4:6] == ["-c", "model_context_window=16384"] and given.args[-2:] == ["-m", "m1"]
    assert tomllib.loads(given.config)["model_context_window"] == 16384
    assert "model_context_window" not in hl.codex(BASE, "m1", None).config  # not known: Codex's own guess


def test_kilo_code_config():
    given = hl.kilo(BASE, "m1", "sk-1", 32768)
    assert given.program == "kilo" and given.args == [] and not given.config_needed
    config = json.loads(given.env["KILO_CONFIG_CONTENT"])
    assert config == json.loads(given.config)
    assert config["$schema"] == "https://app.kilo.ai/config.json"
    provider = config["provider"]["hearth"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"] == {"baseURL": f"{BASE}/v1", "apiKey": "sk-1"}
    # Kilo's schema: a model's limit has both context and output; tool_call says it calls tools
    assert provider["models"]["m1"] == {"name": "m1 (Hearth)", "limit": {"context": 32768, "output": REPLY_ROOM},
                                        "tool_call": True}
    assert config["model"] == config["small_model"] == "hearth/m1"
    assert config["enabled_providers"] == ["hearth"]  # no Kilo Gateway beside it
    assert "apiKey" not in json.loads(hl.kilo(BASE, "m1", None).env["KILO_CONFIG_CONTENT"])["provider"]["hearth"][
        "options"]


def test_claude_code_waits_for_a_long_first_read():
    env = hl.claude(BASE, "m1", None, 32768).env
    # its stream watchdog takes the larger of this and 300 s; a ping does not count as an event
    assert int(env["CLAUDE_STREAM_IDLE_TIMEOUT_MS"]) >= 3_600_000
    assert int(env["API_TIMEOUT_MS"]) >= 3_600_000
    # the context is not passed: Claude Code would keep 20k of a 32k context for its reply
    assert "CLAUDE_CODE_MAX_CONTEXT_TOKENS" not in env


def test_opencode_gets_the_model_s_context():
    config = json.loads(hl.opencode(BASE, "m1", None, 16384).env["OPENCODE_CONFIG_CONTENT"])
    assert config["provider"]["hearth"]["models"]["m1"]["limit"] == {"context": 16384, "output": REPLY_ROOM}


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
    assert json.loads(hl.qwen(BASE, "m1", None, 32768).config)["model"]["generationConfig"] == {
        "contextWindowSize": 32768}
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
    assert "defaultCompletionOptions" not in model
    shown = hl.describe("cn", l, "m", True)
    assert "cn --config ~/.continue/hearth.yaml" in shown  # unquoted: the shell expands ~
    (sized,) = yaml.safe_load(hl.cn(BASE, "m", None, 16384).config)["models"]
    assert sized["defaultCompletionOptions"] == {"contextLength": 16384}


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
    assert json.loads(hl.aider(BASE, "m1", None, 8192).config)["openai/m1"]["max_input_tokens"] == 8192
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


# --- the model for each client, chosen from what a service (or the local store) describes ----------

def known(model_id: str, trained: int | None, tools: bool = True, chat: bool = True, served: int | None = None,
          loaded: bool = False) -> Known:
    return Known(model_id, trained, served, loaded, chat, tools)


def test_the_choice_holds_the_client_s_first_request_with_tools():
    claude, aider = hl.CLIENTS["claude"], hl.CLIENTS["aider"]
    models = [known("small", 8192, served=8192, loaded=True), known("base", 32768, tools=False, chat=False),
              known("plain-chat", 32768, tools=False), known("coder", 40960)]
    choice = choose(claude, models, None, None, "small")
    assert not isinstance(choice, NoFit)
    # no service to ask: the context to start it with holds the prompt and the reply's room
    assert (choice.model, choice.context, choice.load_ctx) == ("coder", 32768, 32768)
    assert choice.context >= claude.first_prompt + REPLY_ROOM
    assert choice.limits(claude) == ("context 32,768 tokens (Claude Code's first request: about 20,070); "
                                     "tool calls in its chat template")
    # a client that sends no tools takes the loaded model when it holds the prompt
    assert choose(aider, models, None, None, "small").model == "small"


def test_without_a_model_that_fits_the_choice_says_why_and_what_to_pull():
    claude = hl.CLIENTS["claude"]
    choice = choose(claude, [known("small", 8192), known("base", 32768, tools=False, chat=False),
                             known("plain-chat", 32768, tools=False)], None, None, None)
    assert isinstance(choice, NoFit)
    message = choice.message()
    assert "  small       its context is 8,192 tokens" in message
    assert "  base        no chat template (a base model)" in message
    assert "  plain-chat  its chat template does not render tools" in message
    assert f"\n  hearth pull {PLAIN_SUGGESTION}\n" in message and "hearth launch claude" in message


def test_a_named_model_is_used_with_warnings():
    claude = hl.CLIENTS["claude"]
    choice = choose(claude, [known("small", 8192)], None, "small", None)
    assert not isinstance(choice, NoFit) and choice.model == "small" and choice.context == 8192
    assert choice.warnings == ["small: its context is 8,192 tokens; Claude Code's first request is about 20,070 "
                               "tokens: `hearth launch claude` without --model picks a model that fits"]
    other = choose(claude, [], None, "elsewhere", None)
    assert not isinstance(other, NoFit) and other.context is None and "used as named" in other.warnings[0]


def test_context_to_load():
    assert context_to_load(13369, 32768) == 16384
    assert context_to_load(24166, 40960) == 32768
    assert context_to_load(24166, 8192) == 8192  # never more than the trained context
    assert context_to_load(16384, None) == 16384


#: a chat template in Qwen 2.5's shape: it renders the tools, the calls and their results
TOOLS_TEMPLATE = """{%- if tools %}<|im_start|>system
You may call functions:
<tools>
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
</tools>
Call one as <tool_call>{"name": <name>, "arguments": <arguments>}</tool_call><|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == "assistant" and message.tool_calls %}<|im_start|>assistant
{%- for tc in message.tool_calls %}
<tool_call>
{"name": "{{ tc.function.name }}", "arguments": {{ tc.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% elif message.role == "tool" %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


def write_tools_model(path: Path, context_length: int) -> Path:
    """A two-layer llama with random weights, a vocabulary of the 256 bytes (any text tokenizes),
    ``TOOLS_TEMPLATE`` and a long trained context: a model launch may pick for any client, which
    loads in a second."""
    from gguf import GGUFWriter

    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    n_embd, n_head, n_kv, n_ff = 64, 4, 2, 128
    rng = np.random.default_rng(0)

    def mat(*shape: int) -> np.ndarray:
        return rng.normal(0.0, 0.3, size=shape).astype(np.float32)

    w = GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_context_length(context_length)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([2, 3, 3] + [6] * 256)  # unknown, control, control, then bytes
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template(TOOLS_TEMPLATE)
    head = n_embd // n_head
    ones = np.ones(n_embd, dtype=np.float32)
    w.add_tensor("token_embd.weight", mat(len(tokens), n_embd))
    for il in range(2):
        p = f"blk.{il}."
        for name, shape in (("attn_q", (n_head * head, n_embd)), ("attn_k", (n_kv * head, n_embd)),
                            ("attn_v", (n_kv * head, n_embd)), ("attn_output", (n_embd, n_head * head)),
                            ("ffn_gate", (n_ff, n_embd)), ("ffn_up", (n_ff, n_embd)), ("ffn_down", (n_embd, n_ff))):
            w.add_tensor(p + name + ".weight", mat(*shape))
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "ffn_norm.weight", ones)
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", mat(len(tokens), n_embd))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def tools_server(tmp_path_factory):
    """A service whose default context (``--ctx 4096``) is shorter than the agents' prompts, with
    a model whose template does tool calls and whose trained context (32k) holds them all."""
    data = tmp_path_factory.mktemp("launch-tools-data")
    model = write_tools_model(data / "tools-tiny.gguf", 32768)
    done = subprocess.run([*hearth_argv(), "import", str(model)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HEARTH_DATA_DIR": str(data)})
    assert done.returncode == 0, done.stderr
    s = Service(data, "--model", "tools-tiny", "--ctx", "4096", "--keep-alive", "10m", "--parallel", "1").wait_ready()
    yield s
    s.stop()


def _resident(server: Service, model_id: str) -> dict:
    return next(m for m in server.stats()["models"] if m["id"] == model_id)


def test_launch_loads_the_model_with_the_context_the_client_needs(tools_server):
    assert _resident(tools_server, "tools-tiny")["ctx"] == 4096  # the service's default
    r = on(tools_server, "codex")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.splitlines()[:2] == [
        "# codex → Hearth, model tools-tiny",
        "# context 16,384 tokens (Codex's first request: about 9,273); tool calls in its chat template"]
    assert ("# loaded tools-tiny with a 16,384-token context (the service's default for it: 4,096), kept loaded "
            "until you unload it:") in out
    assert f"#   curl -X POST {tools_server.url}/hearth/models/tools-tiny/unload" in out
    assert "-c model_context_window=16384 -m tools-tiny" in out
    resident = _resident(tools_server, "tools-tiny")
    assert resident["max_request_tokens"] == 16384 >= hl.CLIENTS["codex"].first_prompt + REPLY_ROOM
    assert resident["keep_alive"] == -1  # unloaded after a keep-alive, it would come back with 4,096
    # Claude Code's prompt needs more: the model is loaded again, with 32k
    r = on(tools_server, "claude")
    assert r.returncode == 0, r.stderr
    assert "# context 32,768 tokens (Claude Code's first request: about 20,070)" in r.stdout
    assert "export CLAUDE_STREAM_IDLE_TIMEOUT_MS=3600000" in r.stdout
    assert _resident(tools_server, "tools-tiny")["max_request_tokens"] == 32768
    # and a shorter prompt takes the model as it is now
    r = on(tools_server, "opencode")
    assert "# loaded" not in r.stdout and '"context": 32768' in r.stdout


#: a stand-in for Kilo Code: reads its config, asks the service how its model is loaded, and
#: sends one chat request the way the config says
FAKE_KILO = """
import json, os, urllib.request, openai
config = json.loads(os.environ["KILO_CONFIG_CONTENT"])
provider = config["provider"]["hearth"]
model = config["model"].split("/", 1)[1]
base = provider["options"]["baseURL"]
stats = json.load(urllib.request.urlopen(base.removesuffix("/v1") + "/hearth/stats"))
resident = next(m for m in stats["models"] if m["id"] == model)
c = openai.OpenAI(base_url=base, api_key=provider["options"].get("apiKey", "none"), max_retries=0)
r = c.chat.completions.create(model=model, max_tokens=2, messages=[{"role": "user", "content": "Hi"}])
print(json.dumps({"limit": provider["models"][model]["limit"], "ctx": resident["max_request_tokens"],
                  "keep_alive": resident["keep_alive"], "tokens": r.usage.completion_tokens}))
"""


def test_run_keeps_the_context_while_the_client_runs_then_gives_the_keep_alive_back(tools_server, tmp_path):
    urllib.request.urlopen(urllib.request.Request(f"{tools_server.url}/hearth/models/tools-tiny/unload", data=b"{}",
                                                  headers={"Content-Type": "application/json"}))
    r = on(tools_server, "kilo", "--run", path=_client(tmp_path, "kilo", FAKE_KILO))
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout)
    assert seen == {"limit": {"context": 32768, "output": REPLY_ROOM}, "ctx": 32768, "keep_alive": -1, "tokens": 2}
    assert "# loaded tools-tiny with a 32,768-token context" in r.stderr and "while the client runs" in r.stderr
    assert _resident(tools_server, "tools-tiny")["keep_alive"] == 600  # the service's --keep-alive 10m


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
    r = on(server, "qwen", "--model", "smollm2-135m", "--run", "--", "-p", "x", path=_client(tmp_path, "qwen", FAKE_QWEN))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["args"] == ["--auth-type", "openai", "-p", "x"] and out["tokens"] == 2
    assert out["settings"]["model"] == {"name": "smollm2-135m", "skipStartupContext": True,
                                        "generationConfig": {"contextWindowSize": 8192}}
    assert not os.path.exists(out["path"])


def _check(server, tmp_path, source: str, **env: str) -> subprocess.CompletedProcess:
    bin_dir = _client(tmp_path, "qwen", source)
    full = {**os.environ, **env, "PATH": bin_dir + os.pathsep + os.environ["PATH"], "HEARTH_DATA_DIR": str(server.data)}
    return subprocess.run([*hearth_argv(), "launch", "--check", "qwen", "--model", "smollm2-135m", "--port",
                           str(server.port), "--timeout", "120"], capture_output=True, text=True, env=full, timeout=300)


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
                # 7.8.1's platform packages (its binaries) were never published: it does not install
                "kilo": "@kilocode/cli@7.7.7", "qwen": "@qwen-code/qwen-code", "cn": "@continuedev/cli"}
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


@real_clients
def test_claude_code_reads_the_stream_idle_timeout_variable():
    """The installed Claude Code still takes its stream watchdog's limit from the variable launch sets
    (its bundle is a compiled binary with the JavaScript inside)."""
    program = Path(_installed("claude")) / "claude"
    bundle = program.resolve().read_bytes()
    assert b"Math.max(Number(process.env.CLAUDE_STREAM_IDLE_TIMEOUT_MS)||0,300000)" in bundle
    assert b'Rn.type==="ping"' in bundle or b'.type==="ping"){' in bundle  # a ping does not re-arm it


@real_clients
def test_kilo_code_takes_the_config(tmp_path):
    """Kilo Code drops a config that does not match its schema without a word: the one it resolves
    must carry the provider as launch wrote it."""
    bin_dir = _installed("kilo")
    given = hl.kilo("http://127.0.0.1:5555", "m1", None, 32768)
    env = {**os.environ, **given.env, "HOME": str(tmp_path)}
    done = subprocess.run([str(Path(bin_dir) / "kilo"), "debug", "config"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    resolved = json.loads(done.stdout)
    wrote = json.loads(given.env["KILO_CONFIG_CONTENT"])
    assert resolved["provider"]["hearth"] == wrote["provider"]["hearth"]
    assert resolved["model"] == "hearth/m1" and resolved["enabled_providers"] == ["hearth"]


@real_clients
@pytest.mark.timeout(3600)
def test_a_newcomer_pulls_what_launch_suggests_and_every_agent_completes_a_turn(loopback_hub, tmp_path):
    """The path a new user takes: a plain ``hearth serve`` has no model that holds an agent's first
    request, so ``hearth launch`` names a catalog model to pull; once pulled (from a hub on
    loopback: a tiny model of a real agent family, Qwen3-Coder's template and vocabulary, whose
    turn ends at once), ``hearth launch`` without ``--model`` picks it, loads it with the context
    the agent needs, and Claude Code, Codex and opencode each complete a turn."""
    from runtime.store.catalog import load_catalog
    from tests.family_models import write_family_model

    templates = Path(__file__).parent.parent / "chat" / "templates"
    s = Service(tmp_path / "data", "--parallel", "1").wait_ready()
    try:
        said = on(s, "claude")
        assert said.returncode == 1, said.stdout + said.stderr
        pull = next(line.split()[-1] for line in said.stderr.splitlines() if line.strip().startswith("hearth pull "))
        entry = load_catalog()[pull]
        model = write_family_model(tmp_path / "tiny.gguf", "qwen35", (templates / "Qwen3-Coder.jinja").read_text(),
                                   arch="qwen2", ctx=entry.context_length, answers_at_once=True)
        loopback_hub.add_repo(entry.raw["repo"], {entry.raw["files"][entry.raw["default_quant"]]["file"]: model})
        got = subprocess.run([*hearth_argv(), "pull", pull], capture_output=True, text=True,
                             env={**os.environ, "HEARTH_DATA_DIR": str(s.data)}, timeout=600)
        assert got.returncode == 0, got.stdout + got.stderr
        for client in ("claude", "codex", "opencode"):
            bin_dir = _installed(client)
            home = tmp_path / client
            (home / ".codex").mkdir(parents=True)
            env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"], "HOME": str(home),
                   "CODEX_HOME": str(home / ".codex"), "HEARTH_DATA_DIR": str(s.data)}
            r = subprocess.run([*hearth_argv(), "launch", "--check", client, "--port", str(s.port), "--timeout", "1200"],
                               capture_output=True, text=True, env=env, timeout=1500)
            assert r.returncode == 0, r.stdout + r.stderr
            assert f"model {pull}" in r.stdout and "result    worked" in r.stdout and ", all 2xx" in r.stdout, r.stdout
    finally:
        s.stop()
