"""The settings that point each coding agent at Hearth, and how ``--check`` runs it once.

Every client gets the service's address, its key (or a placeholder: the clients insist on
one), the model, and the switches that keep its prompt the same from request to request, so
that the prefix cache serves the 5-20k tokens of tools and instructions it re-sends each turn:

- Claude Code speaks Anthropic Messages: ``ANTHROPIC_BASE_URL``, ``ANTHROPIC_AUTH_TOKEN`` and the
  model variables (``ANTHROPIC_MODEL`` and the aliases it uses for background work);
  ``CLAUDE_CODE_ATTRIBUTION_HEADER=0`` leaves out the per-request billing line at the top of
  its system prompt; ``API_TIMEOUT_MS`` and ``CLAUDE_STREAM_IDLE_TIMEOUT_MS`` give a long first
  read on a CPU an hour (see ``claude``).
- Codex speaks the Responses API: a ``model_providers`` entry with ``wire_api = "responses"``,
  given on its command line as ``-c`` overrides (and printed as a config.toml section), and the
  model's context as ``model_context_window``.
- opencode takes an OpenAI-compatible provider in its JSON config (``OPENCODE_CONFIG_CONTENT``),
  the model's context as its ``limit``; Kilo Code's CLI (an opencode fork) the same config
  schema in ``KILO_CONFIG_CONTENT``.
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

Each client's first request (its instructions and tools, in an empty folder) was measured once
(``Client.first_prompt``); ``model_choice.py`` picks a model whose context holds it.

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
#: tokens kept for the reply (and the first tool results) beyond a client's first prompt; also the
#: output limit given to the clients that take one with the context (opencode, Kilo Code)
REPLY_ROOM = 4096
#: how long a client waits for an answer: the first read of a long prompt on a CPU takes minutes
LONG_READ_MS = "3600000"
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
    title: str  #: the name people know it by
    install: str
    #: (base_url, model, key, context) -> Launch; context: the longest request the model takes,
    #: for the clients that size their conversation by it (None: not known)
    build: Callable[[str, str, str | None, int | None], Launch]
    #: the arguments (after the launch's own) that run one task without asking anything
    once: Callable[[str], list[str]]  # (task) -> list[str]
    #: tokens of its first request in an empty folder (instructions and tools), as measured (see CLIENTS)
    first_prompt: int
    #: it sends tools (Aider does not: its edits are text in formats of its own)
    needs_tools: bool = True
    #: the environment that keeps a ``--check`` run short (an output limit, a turn limit)
    check_env: dict[str, str] = field(default_factory=dict)
    version_args: tuple[str, ...] = ("--version",)


def claude(base_url: str, model: str, key: str | None, context: int | None = None) -> Launch:
    """Claude Code's settings. It also takes a context (``CLAUDE_CODE_MAX_CONTEXT_TOKENS``, for a
    model whose name does not start with ``claude-``), but keeps up to 20,000 tokens of it for the
    reply: with a 32k context it would compact its 20k-token first prompt before the first turn.
    Without it the service's "prompt is too long: N tokens > M maximum" makes it compact when the
    conversation outgrows the context."""
    env = {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_AUTH_TOKEN": key or NO_KEY, "ANTHROPIC_MODEL": model,
           "ANTHROPIC_DEFAULT_OPUS_MODEL": model, "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
           "ANTHROPIC_DEFAULT_HAIKU_MODEL": model, "ANTHROPIC_SMALL_FAST_MODEL": model,
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           # no per-request billing line at the top of the system prompt: the prompt stays the
           # same from request to request, so the prefix cache serves it
           "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
           # a long prompt on a CPU takes minutes to read the first time
           "API_TIMEOUT_MS": LONG_READ_MS,
           # Claude Code drops a stream after 300 s without an event it counts (a ``ping`` is not
           # counted) and sends the request again without streaming. Its source (2.1.197):
           # ``function S6r(){return Math.max(Number(process.env.CLAUDE_STREAM_IDLE_TIMEOUT_MS)||0,300000)}``
           # and, per event, ``if(Rn.type==="ping"){yield{type:"stream_event",event:Rn};continue}vo();``
           # (``vo`` re-arms the timer): the variable raises that limit, never below 300 s
           "CLAUDE_STREAM_IDLE_TIMEOUT_MS": LONG_READ_MS}
    # An Anthropic key in the shell would be sent too, and Claude Code asks which one to use.
    return Launch("claude", env=env, unset=["ANTHROPIC_API_KEY"])


def _toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid TOML basic string


def codex(base_url: str, model: str, key: str | None, context: int | None = None) -> Launch:
    provider = {"name": "Hearth", "base_url": f"{base_url}/v1", "wire_api": "responses"}
    if key:
        provider["env_key"] = "HEARTH_API_KEY"
    inline = "{" + ", ".join(f"{k} = {_toml_str(v)}" for k, v in provider.items()) + "}"
    top = [f"model = {_toml_str(model)}", 'model_provider = "hearth"']
    args = ["-c", "model_provider=hearth", "-c", f"model_providers.hearth={inline}"]
    if context:  # what Codex sizes its conversation (and its compaction) by; it cannot know it otherwise
        top.append(f"model_context_window = {context}")
        args += ["-c", f"model_context_window={context}"]
    section = "\n".join([*top, "", "[model_providers.hearth]", *(f"{k} = {_toml_str(v)}" for k, v in provider.items())])
    env = {"OPENAI_BASE_URL": f"{base_url}/v1"}
    if key:
        env["HEARTH_API_KEY"] = key
    return Launch("codex", args=[*args, "-m", model], env=env, config=section, config_path="~/.codex/config.toml")


def opencode_config(base_url: str, model: str, key: str | None, context: int | None = None) -> dict:
    """opencode's config (Kilo Code's CLI reads the same schema): one OpenAI-compatible provider."""
    options = {"baseURL": f"{base_url}/v1"}
    if key:
        options["apiKey"] = key
    entry: dict = {"name": f"{model} (Hearth)"}
    if context:  # it compacts the conversation before it outgrows context - output
        entry["limit"] = {"context": context, "output": min(REPLY_ROOM, context // 4)}
    return {"$schema": "https://opencode.ai/config.json",
            "provider": {"hearth": {"npm": "@ai-sdk/openai-compatible", "name": "Hearth", "options": options,
                                    "models": {model: entry}}},
            "model": f"hearth/{model}"}


def opencode(base_url: str, model: str, key: str | None, context: int | None = None) -> Launch:
    config = opencode_config(base_url, model, key, context)
    return Launch("opencode", env={"OPENCODE_CONFIG_CONTENT": json.dumps(config)},
                  config=json.dumps(config, indent=2), config_path="opencode.json")


def kilo_config(base_url: str, model: str, key: str | None, context: int | None = None) -> dict:
    """Kilo Code's CLI config: opencode's provider entry (its schema names the same fields:
    ``npm``, ``options.baseURL``/``apiKey``, ``models.<id>.limit.context``/``output``), only Hearth's
    models enabled (no Kilo Gateway), titles and summaries by the same model, no update check."""
    config = opencode_config(base_url, model, key, context)
    config["provider"]["hearth"]["models"][model]["tool_call"] = True
    return {**config, "$schema": "https://app.kilo.ai/config.json", "small_model": f"hearth/{model}",
            "enabled_providers": ["hearth"], "autoupdate": False, "share": "disabled"}


def kilo(base_url: str, model: str, key: str | None, context: int | None = None) -> Launch:
    config = kilo_config(base_url, model, key, context)
    return Launch("kilo", env={"KILO_CONFIG_CONTENT": json.dumps(config)},
                  config=json.dumps(config, indent=2), config_path="kilo.json")


def qwen_settings(model: str, context: int | None = None) -> dict:
    model_settings: dict = {"name": model,
                            # no date and directory listing as the first message of each session
                            "skipStartupContext": True}
    if context:  # it compresses the history at 70% of it
        model_settings["generationConfig"] = {"contextWindowSize": context}
    return {"security": {"auth": {"selectedType": "openai"}},
            "model": model_settings,
            # no memory index in the system prompt, nor a request after each turn to extract memories
            "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
            "privacy": {"usageStatisticsEnabled": False},
            "general": {"enableAutoUpdate": False}}


def qwen(base_url: str, model: str, key: str | None, context: int | None = None) -> Launch:
    env = {"OPENAI_BASE_URL": f"{base_url}/v1", "OPENAI_API_KEY": key or NO_KEY, "OPENAI_MODEL": model,
           "QWEN_CODE_API_TIMEOUT_MS": LONG_READ_MS, "QWEN_CODE_SYSTEM_SETTINGS_PATH": CONFIG}
    return Launch("qwen", args=["--auth-type", "openai"], env=env, config=json.dumps(qwen_settings(model, context), indent=2),
                  config_path="~/.qwen/settings.json", config_needed=True)


def continue_config(base_url: str, model: str, key: str | None, context: int | None = None) -> str:
    """Continue's agent config: one OpenAI-compatible model (YAML; every value a JSON string)."""
    q = json.dumps
    sized = ["    defaultCompletionOptions:", f"      contextLength: {context}"] if context else []
    return "\n".join([
        "name: Hearth", "version: 1.0.0", "schema: v1", "models:",
        f"  - name: {q(model + ' (Hearth)')}", "    provider: openai", f"    model: {q(model)}",
        f"    apiBase: {q(base_url + '/v1')}", f"    apiKey: {q(key or NO_KEY)}",
        "    roles: [chat, edit, apply]", "    capabilities: [tool_use]", *sized, ""])


def cn(base_url: str, model: str, key: str | None, context: int | None = None) -> Launch:
    return Launch("cn", args=["--config", CONFIG], env={"CONTINUE_CLI_ENABLE_TELEMETRY": "0"},
                  config=continue_config(base_url, model, key, context), config_path="~/.continue/hearth.yaml",
                  config_needed=True)


def aider_metadata(model: str, context: int | None = None) -> dict:
    """LiteLLM's entry for the model: known, free, a chat model (without it Aider fetches LiteLLM's
    price list from the internet to look the model up, and warns that it does not know it), and
    its context (Aider warns before it sends more)."""
    entry: dict = {"litellm_provider": "openai", "mode": "chat", "supports_function_calling": True,
                   "input_cost_per_token": 0.0, "output_cost_per_token": 0.0}
    if context:
        entry["max_input_tokens"] = context
    return {f"openai/{model}": entry}


def aider(base_url: str, model: str, key: str | None, context: int | None = None) -> Launch:
    args = ["--model", f"openai/{model}", "--openai-api-base", f"{base_url}/v1", "--model-metadata-file", CONFIG,
            "--no-check-update", "--no-analytics", "--no-show-release-notes", "--no-show-model-warnings",
            # the repository map comes before the chat history: redrawn only when the chat's files change
            "--map-refresh", "files"]
    env = {"OPENAI_API_KEY": key or NO_KEY, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return Launch("aider", args=args, env=env, config=json.dumps(aider_metadata(model, context), indent=2),
                  config_path="~/.aider.model.metadata.json", config_needed=True)


CHECK_TASK = "Create a file named hello.txt containing the word hi. Do nothing else."
CHECK_FILE = "hello.txt"

# first_prompt: the tokens of the client's first request, measured once on Hearth with each
# client's settings from this module, in an empty folder, on the task of ``--check``: the larger
# count of the two embedded models' tokenizers (SmolLM2 / Gemma 3; models without a tool template,
# so the tools are described in the prompt). A repository adds its instruction files, git status
# or repository map on top.
CLIENTS: dict[str, Client] = {c.name: c for c in (
    # Claude Code 2.1.197: 20,070 / 19,320 tokens (24 tools, 76 KB of JSON)
    Client("claude", "Claude Code", "npm install -g @anthropic-ai/claude-code", claude,
           lambda task: ["-p", task, "--permission-mode", "acceptEdits", "--max-turns", "4"],
           first_prompt=20070, check_env={"CLAUDE_CODE_MAX_OUTPUT_TOKENS": "512"}),
    # Codex 0.171.0: 9,273 / 8,959 tokens
    Client("codex", "Codex", "npm install -g @openai/codex", codex,
           lambda task: ["exec", "--skip-git-repo-check", "--sandbox", "workspace-write", task], first_prompt=9273),
    # opencode 1.18.33: 7,648 / 7,391 tokens (after a 599-token request for the session's title)
    Client("opencode", "opencode", "npm install -g opencode-ai", opencode, lambda task: ["run", task],
           first_prompt=7648),
    # Kilo Code CLI 7.7.7: 12,537 / 12,169 tokens
    Client("kilo", "Kilo Code", "npm install -g @kilocode/cli", kilo, lambda task: ["run", task],
           first_prompt=12537),
    # Qwen Code 0.15.10: 13,400 / 12,925 tokens
    Client("qwen", "Qwen Code", "npm install -g @qwen-code/qwen-code", qwen,
           lambda task: ["-p", task, "--approval-mode", "auto-edit", "--max-session-turns", "4"],
           first_prompt=13400, check_env={"QWEN_CODE_MAX_OUTPUT_TOKENS": "512"}),
    # Continue's CLI 1.5.47: 1,936 / 1,860 tokens
    Client("cn", "Continue's CLI", "npm install -g @continuedev/cli", cn, lambda task: ["-p", task, "--auto"],
           first_prompt=1936),
    # Aider 0.86.2: 742 / 696 tokens (no git repository, so no repository map: one adds up to 1,024)
    Client("aider", "Aider", "pipx install aider-chat", aider,
           # streamed, its answers carry no usage (it asks for none): whole answers do
           lambda task: ["--message", task, "--yes-always", "--no-git", "--no-pretty", "--no-stream", CHECK_FILE],
           first_prompt=742, needs_tools=False),
)}
BUILDERS = {name: c.build for name, c in CLIENTS.items()}


def describe(client: str, launch: Launch, model: str, running: bool, notes: list[str] | None = None) -> str:
    """The settings as shell lines: what a person pastes into a shell (or ``eval``s) works as it
    is. Everything else (notes, a config file's content) is a comment."""
    lines = [f"# {client} → Hearth, model {model}"]
    lines += [f"# {line}" for note in notes or [] for line in note.splitlines()]
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
        lines += ["", f"# {where} {launch.config_path}:", *commented(launch.config)]
    return "\n".join(lines)


def commented(text: str) -> list[str]:
    """``text`` as shell comments: ``# `` before each line."""
    return [f"# {line}" if line else "#" for line in text.rstrip("\n").splitlines()]

