"""``hearth launch claude|codex|opencode``: point a coding agent at this machine's Hearth.

It prints the environment variables and configuration that make the client use Hearth's API
with the current model (the one the running service has loaded, else the default), and with
``--run`` starts the client with them, without writing any of the client's files:

- Claude Code speaks Anthropic Messages: ``ANTHROPIC_BASE_URL``, ``ANTHROPIC_AUTH_TOKEN`` and
  the model variables (``ANTHROPIC_MODEL`` and the aliases it uses for background work).
- Codex speaks the Responses API: a ``model_providers`` entry with ``wire_api = "responses"``,
  given on its command line as ``-c`` overrides (and printed as a config.toml section).
- opencode takes an OpenAI-compatible provider in its JSON config (``OPENCODE_CONFIG_CONTENT``).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field

from runtime.config import DEFAULT_HOST, DEFAULT_MODEL, DEFAULT_PORT

CLIENTS = ("claude", "codex", "opencode")
_INSTALL = {"claude": "npm install -g @anthropic-ai/claude-code", "codex": "npm install -g @openai/codex",
            "opencode": "npm install -g opencode-ai"}
#: the placeholder token when the service has no key (the clients insist on having one)
NO_KEY = "hearth"


@dataclass(slots=True)
class Launch:
    """What starts one client against Hearth: its program, arguments, environment and notes."""

    program: str
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    unset: list[str] = field(default_factory=list)
    config: str | None = None  # a config file section to show, with its path in ``config_path``
    config_path: str | None = None


def current_model(base_url: str, key: str | None, fallback: str) -> tuple[str, bool]:
    """The model the service at ``base_url`` has loaded (and True), or ``fallback`` (and False) when
    none runs there or none is loaded."""
    req = urllib.request.Request(f"{base_url}/health", headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=2) as r:
            model = json.loads(r.read()).get("engine", {}).get("model")
    except (urllib.error.URLError, OSError, ValueError):
        return fallback, False
    return (model, True) if isinstance(model, str) and model else (fallback, True)


def claude(base_url: str, model: str, key: str | None) -> Launch:
    env = {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_AUTH_TOKEN": key or NO_KEY, "ANTHROPIC_MODEL": model,
           "ANTHROPIC_DEFAULT_OPUS_MODEL": model, "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
           "ANTHROPIC_DEFAULT_HAIKU_MODEL": model, "ANTHROPIC_SMALL_FAST_MODEL": model,
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
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


BUILDERS = {"claude": claude, "codex": codex, "opencode": opencode}


def describe(client: str, launch: Launch, model: str, running: bool) -> str:
    lines = [f"# {client} → Hearth, model {model}"]
    if not running:
        lines.append("# (no Hearth service answers there yet: start it with `hearth serve`)")
    lines += [f"unset {name}" for name in launch.unset]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in launch.env.items() if k != "OPENCODE_CONFIG_CONTENT"]
    if "OPENCODE_CONFIG_CONTENT" in launch.env:
        lines.append(f"export OPENCODE_CONFIG_CONTENT={shlex.quote(launch.env['OPENCODE_CONFIG_CONTENT'])}")
    lines.append(shlex.join([launch.program, *launch.args]))
    if launch.config:
        lines += ["", f"# or put this in {launch.config_path}:", launch.config]
    return "\n".join(lines)


def add_parser(sub) -> None:
    p = sub.add_parser("launch", help="print (or --run) the settings that point a coding agent at Hearth",
                       epilog="Arguments after -- go to the client: hearth launch claude --run -- -p 'hello'")
    p.add_argument("client", choices=CLIENTS)
    p.add_argument("--host", default=DEFAULT_HOST, help="the service's address (default %(default)s)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="the service's port (default %(default)s)")
    p.add_argument("--model", help="the model to use (default: the one the service has loaded)")
    p.add_argument("--run", action="store_true", help="start the client with these settings")


def split_client_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """``hearth launch ... -- ARGS``: Hearth's arguments and the client's."""
    if argv[:1] == ["launch"] and "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def run(args: argparse.Namespace) -> int:
    from runtime.config import data_dir
    from runtime.api_key import load_key

    base_url = f"http://{args.host}:{args.port}"
    key = os.environ.get("HEARTH_API_KEY") or load_key(data_dir())
    model, running = (args.model, True) if args.model else current_model(base_url, key, DEFAULT_MODEL)
    launch = BUILDERS[args.client](base_url, model, key)
    launch.args += getattr(args, "client_args", [])
    if not args.run:
        print(describe(args.client, launch, model, running))
        return 0
    program = shutil.which(launch.program)
    if program is None:
        print(f"hearth: `{launch.program}` is not on PATH; install it ({_INSTALL[args.client]}) or run "
              f"`hearth launch {args.client}` to see the settings", file=sys.stderr)
        return 127
    env = {k: v for k, v in os.environ.items() if k not in launch.unset}
    env.update(launch.env)
    return subprocess.call([program, *launch.args], env=env)
