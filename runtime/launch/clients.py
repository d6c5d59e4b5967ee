"""The settings that point each coding agent at Hearth, and how ``--check`` runs it once.

Every client gets the service's address, its key (or a placeholder: the clients insist on
one), the model, and the switches that keep its prompt the same from request to request, so
that the prefix cache serves the 5-20k tokens of tools and instructions it re-sends each turn:

- Claude Code speaks Anthropic Messages: ``ANTHROPIC_BASE_URL``, ``ANTHROPIC_AUTH_TOKEN`` and the
  model variables (``ANTHROPIC_MODEL`` and the aliases it uses for background work);
  ``CLAUDE_CODE_ATTRIBUTION_HEADER=0`` leaves out the per-request billing line at the top of
  its system prompt.
- Codex speaks the Responses API: a ``model_providers`` entry with ``wire_api = "responses"``,
  given on its command line as ``-c`` overrides (and printed as a config.toml section).
- opencode takes an OpenAI-compatible provider in its JSON config (``OPENCODE_CONFIG_CONTENT``).
- Qwen Code speaks OpenAI chat completions: ``OPENAI_BASE_URL``/``OPENAI_API_KEY``/
  ``OPENAI_MODEL`` with ``--auth-type openai``. Its settings (a settings.json layer, given with
  ``QWEN_CODE_SYSTEM_SETTINGS_PATH``) turn on ``model.skipStartupContext``: without it the first
  message of every session carries today's date and a listing of the working directory, which
  changes as soon as a file does; ``memory.enableManagedAutoMemory`` off, which otherwise puts
  the memory index in the system prompt and sends a memory-extraction request with a prompt of
  its own after every turn; and its usage statistics and update check off.
- Continue's CLI (``cn``) reads an agent config YAML given with ``--config``: one model with
  ``provider: openai`` and ``apiBase``. Its system prompt starts with the working directory,
  the date and ``git status`` taken at the start of the session, and no switch removes them:
  the prompt is stable within a session, and a new session re-reads it from there on.
- Aider speaks OpenAI chat completions through LiteLLM: ``--openai-api-base``, model
  ``openai/<name>`` described in a model metadata file (else it fetches LiteLLM's price list to
  look the model up), without its update check, analytics, release notes and model warnings;
  ``--map-refresh files`` keeps the repository map (sent ahead of the chat history) the same
  until the set of files in the chat changes.

Gemini CLI is not among them: it speaks only Google's Gemini API (``GOOGLE_GEMINI_BASE_URL``
moves it to another host of that same API), which Hearth does not serve.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

#: the placeholder token when the service has no key (the clients insist on having one)
NO_KEY = "hearth"
#: stands for the path of the client's config file in ``Launch.args`` and ``Launch.env``: a
#: private temporary copy of ``Launch.config`` when Hearth starts the client, ``config_path``
#: in the printed settings
CONFIG = "@config@"


@dataclass(slots=True)
class Launch:
    """What starts one client against Hearth: its program, arguments, environment and notes."""

    program: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    unset: list[str] = field(default_factory=list)
    config: str | None = None  # a config file's content to show, with its path in ``config_path``
    config_path: str | None = None
    #: the client reads ``config`` only from a file (``CONFIG`` in args or env says where)
    config_needed: bool = False

    def with_config(self, path: str) -> tuple[list[str], dict[str, str]]:
        """The arguments and environment with ``CONFIG`` replaced by ``path``."""
        args = [a.replace(CONFIG, path) for a in self.args]
        env = {k: v.replace(CONFIG, path) for k, v in self.env.items()}
        return args, env


@dataclass(frozen=True, slots=True)
class Client:
    """One coding agent: how to install it, build its settings, and run it once for ``--check``."""

    name: str
    install: str
    build: Callable[[str, str, str | None], Launch]  # (base_url, model, key) -> Launch
    #: the arguments (after the launch's own) that run one task without asking anything
    once: Callable[[str], list[str]]  # (task) -> list[str]
    #: the environment that keeps a ``--check`` run short (an output limit, a turn limit)
    check_env: dict[str, str] = field(default_factory=dict)
    version_args: tuple[str, ...] = ("--version",)


def claude(base_url: str, model: str, key: str | None) -> Launch:
    env = {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_AUTH_TOKEN": key or NO_KEY, "ANTHROPIC_MODEL": model,
           "ANTHROPIC_DEFAULT_OPUS_MODEL": model, "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
           "ANTHROPIC_DEFAULT_HAIKU_MODEL": model, "ANTHROPIC_SMALL_FAST_MODEL": model,
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           # no per-request billing line at the top of the system prompt: the prompt stays the
           # same from request to request, so the prefix cache serves it
           "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
           # a long prompt on a CPU takes minutes to read the first time
           "API_TIMEOUT_MS": "3600000"}
    # An Anthropic key in the shell would be sent too, and Claude Code asks which one to use.
    return Launch("claude", env=env, unset=["ANTHROPIC_API_KEY"])


def _toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid TOML basic string


def codex(base_url: str, model: str, key: str | None) -> Launch:
    provider = {"name": "Hearth", "base_url": f"{base_url}/v1", "wire_api": "responses"}
    if key:
        provider["env_key"] = "HEARTH_API_KEY"
    inline = "{" + ", ".join(f"{k} = {_toml_str(v)}" for k, v in provider.items()) + "}"
    section = "\n".join([f"model = {_toml_str(model)}", 'model_provider = "hearth"', "", "[model_providers.hearth]",
                         *(f"{k} = {_toml_str(v)}" for k, v in provider.items())])
    env = {"OPENAI_BASE_URL": f"{base_url}/v1"}
    if key:
        env["HEARTH_API_KEY"] = key
    return Launch("codex", args=["-c", "model_provider=hearth", "-c", f"model_providers.hearth={inline}", "-m", model],
                  env=env, config=section, config_path="~/.codex/config.toml")


def opencode_config(base_url: str, model: str, key: str | None) -> dict:
    options = {"baseURL": f"{base_url}/v1"}
    if key:
        options["apiKey"] = key
    return {"$schema": "https://opencode.ai/config.json",
            "provider": {"hearth": {"npm": "@ai-sdk/openai-compatible", "name": "Hearth", "options": options,
                                    "models": {model: {"name": f"{model} (Hearth)"}}}},
            "model": f"hearth/{model}"}


def opencode(base_url: str, model: str, key: str | None) -> Launch:
    config = opencode_config(base_url, model, key)
    return Launch("opencode", env={"OPENCODE_CONFIG_CONTENT": json.dumps(config)},
                  config=json.dumps(config, indent=2), config_path="opencode.json")


def qwen_settings(model: str) -> dict:
    return {"security": {"auth": {"selectedType": "openai"}},
            "model": {"name": model,
                      # no date and directory listing as the first message of each session
                      "skipStartupContext": True},
            # no memory index in the system prompt, nor a request after each turn to extract memories
            "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
            "privacy": {"usageStatisticsEnabled": False},
            "general": {"enableAutoUpdate": False}}


def qwen(base_url: str, model: str, key: str | None) -> Launch:
    env = {"OPENAI_BASE_URL": f"{base_url}/v1", "OPENAI_API_KEY": key or NO_KEY, "OPENAI_MODEL": model,
           "QWEN_CODE_API_TIMEOUT_MS": "3600000", "QWEN_CODE_SYSTEM_SETTINGS_PATH": CONFIG}
    return Launch("qwen", args=["--auth-type", "openai"], env=env, config=json.dumps(qwen_settings(model), indent=2),
                  config_path="~/.qwen/settings.json", config_needed=True)


def continue_config(base_url: str, model: str, key: str | None) -> str:
    """Continue's agent config: one OpenAI-compatible model (YAML; every value a JSON string)."""
    q = json.dumps
    return "\n".join([
        "name: Hearth", "version: 1.0.0", "schema: v1", "models:",
        f"  - name: {q(model + ' (Hearth)')}", "    provider: openai", f"    model: {q(model)}",
        f"    apiBase: {q(base_url + '/v1')}", f"    apiKey: {q(key or NO_KEY)}",
        "    roles: [chat, edit, apply]", "    capabilities: [tool_use]", ""])


def cn(base_url: str, model: str, key: str | None) -> Launch:
    return Launch("cn", args=["--config", CONFIG], env={"CONTINUE_CLI_ENABLE_TELEMETRY": "0"},
                  config=continue_config(base_url, model, key), config_path="~/.continue/hearth.yaml",
                  config_needed=True)


def aider_metadata(model: str) -> dict:
    """LiteLLM's entry for the model: known, free, a chat model (without it Aider fetches LiteLLM's
    price list from the internet to look the model up, and warns that it does not know it)."""
    return {f"openai/{model}": {"litellm_provider": "openai", "mode": "chat", "supports_function_calling": True,
                                "input_cost_per_token": 0.0, "output_cost_per_token": 0.0}}


def aider(base_url: str, model: str, key: str | None) -> Launch:
    args = ["--model", f"openai/{model}", "--openai-api-base", f"{base_url}/v1", "--model-metadata-file", CONFIG,
            "--no-check-update", "--no-analytics", "--no-show-release-notes", "--no-show-model-warnings",
            # the repository map comes before the chat history: redrawn only when the chat's files change
            "--map-refresh", "files"]
    env = {"OPENAI_API_KEY": key or NO_KEY, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return Launch("aider", args=args, env=env, config=json.dumps(aider_metadata(model), indent=2),
                  config_path="~/.aider.model.metadata.json", config_needed=True)


CHECK_TASK = "Create a file named hello.txt containing the word hi. Do nothing else."
CHECK_FILE = "hello.txt"

CLIENTS: dict[str, Client] = {c.name: c for c in (
    Client("claude", "npm install -g @anthropic-ai/claude-code", claude,
           lambda task: ["-p", task, "--permission-mode", "acceptEdits", "--max-turns", "4"],
           {"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "512"}),
    Client("codex", "npm install -g @openai/codex", codex,
           lambda task: ["exec", "--skip-git-repo-check", "--sandbox", "workspace-write", task]),
    Client("opencode", "npm install -g opencode-ai", opencode, lambda task: ["run", task]),
    Client("qwen", "npm install -g @qwen-code/qwen-code", qwen,
           lambda task: ["-p", task, "--approval-mode", "auto-edit", "--max-session-turns", "4"],
           {"QWEN_CODE_MAX_OUTPUT_TOKENS": "512"}),
    Client("cn", "npm install -g @continuedev/cli", cn, lambda task: ["-p", task, "--auto"]),
    Client("aider", "pipx install aider-chat", aider,
           # streamed, its answers carry no usage (it asks for none): whole answers do
           lambda task: ["--message", task, "--yes-always", "--no-git", "--no-pretty", "--no-stream", CHECK_FILE]),
)}
BUILDERS = {name: c.build for name, c in CLIENTS.items()}


def describe(client: str, launch: Launch, model: str, running: bool) -> str:
    lines = [f"# {client} → Hearth, model {model}"]
    if not running:
        lines.append("# (no Hearth service answers there yet: start it with `hearth serve`)")
    lines += [f"unset {name}" for name in launch.unset]
    shown = {k: v for k, v in launch.env.items() if CONFIG not in v}
    # the long JSON last, so the short settings stay readable
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(shown.items(), key=lambda kv: kv[0].endswith("_CONTENT"))]
    # the config's path unquoted, so that the shell expands its ~
    lines.append(shlex.join([launch.program, *launch.args]).replace(CONFIG, launch.config_path or ""))
    if launch.config:
        where = "in" if launch.config_needed else "or put this in"
        lines += ["", f"# {where} {launch.config_path}:", launch.config.rstrip("\n")]
    return "\n".join(lines)
