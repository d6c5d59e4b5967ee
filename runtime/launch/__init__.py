"""``hearth launch CLIENT``: point a coding agent at this machine's Hearth.

It prints the environment variables and configuration that make the client use Hearth's API
with the current model (the one the running service has loaded, else the default); ``--run``
starts the client with them, without writing any of the client's files (a config the client
reads only from a file goes to a private temporary file for the run); ``--check`` runs it once
on a tiny task and reports how the service served it (``check.py``). The clients and their
settings are in ``clients.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from runtime.config import DEFAULT_HOST, DEFAULT_MODEL, DEFAULT_PORT
from runtime.launch.clients import (BUILDERS, CLIENTS, NO_KEY, Launch, aider, claude, cn, codex, describe,
                                    opencode, opencode_config, qwen)

__all__ = ["BUILDERS", "CLIENTS", "NO_KEY", "Launch", "add_parser", "aider", "claude", "cn", "codex",
           "current_model", "describe", "opencode", "opencode_config", "qwen", "run", "split_client_args"]


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


def add_parser(sub) -> None:
    p = sub.add_parser("launch", help="print (or --run, or --check) the settings that point a coding agent at Hearth",
                       epilog="Arguments after -- go to the client: hearth launch claude --run -- -p 'hello'")
    p.add_argument("client", choices=list(CLIENTS))
    p.add_argument("--host", default=DEFAULT_HOST, help="the service's address (default %(default)s)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="the service's port (default %(default)s)")
    p.add_argument("--model", help="the model to use (default: the one the service has loaded)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--run", action="store_true", help="start the client with these settings")
    mode.add_argument("--check", action="store_true",
                      help="run the client once on a tiny task in a temporary directory and report how the "
                           "service served it (requests, errors, prompt cache); exit 1 when it failed")
    p.add_argument("--timeout", type=float, default=900, help="--check: seconds the client may run "
                                                              "(default %(default)s)")


def split_client_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """``hearth launch ... -- ARGS``: Hearth's arguments and the client's."""
    if argv[:1] == ["launch"] and "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def run(args: argparse.Namespace) -> int:
    from runtime.api_key import load_key
    from runtime.config import data_dir

    base_url = f"http://{args.host}:{args.port}"
    key = os.environ.get("HEARTH_API_KEY") or load_key(data_dir())
    model, running = (args.model, True) if args.model else current_model(base_url, key, DEFAULT_MODEL)
    client_args = getattr(args, "client_args", [])
    if getattr(args, "check", False):
        from runtime.launch.check import run_check

        if args.model and not running:
            running = current_model(base_url, key, DEFAULT_MODEL)[1]
        return run_check(args.client, base_url, model, running, key, args.timeout, client_args)
    launch = BUILDERS[args.client](base_url, model, key)
    if not args.run:
        launch.args += client_args
        print(describe(args.client, launch, model, running))
        return 0
    program = shutil.which(launch.program)
    if program is None:
        print(f"hearth: `{launch.program}` is not on PATH; install it ({CLIENTS[args.client].install}) or run "
              f"`hearth launch {args.client}` to see the settings", file=sys.stderr)
        return 127
    with tempfile.TemporaryDirectory(prefix="hearth-launch-") as tmp:
        config = Path(tmp) / ("config" + Path(launch.config_path or "x.txt").suffix)
        if launch.config_needed and launch.config is not None:
            config.write_text(launch.config)
        cargs, cenv = launch.with_config(str(config))
        env = {k: v for k, v in os.environ.items() if k not in launch.unset}
        env.update(cenv)
        return subprocess.call([program, *cargs, *client_args], env=env)
