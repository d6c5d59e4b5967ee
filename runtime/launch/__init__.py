"""``hearth launch CLIENT``: point a coding agent at this machine's Hearth.

It picks a model whose context holds the client's first prompt and whose template does tool
calls (``model_choice.py``), loading it with a larger context when its default is too small, or
says which catalog model to pull; then it prints the environment variables and configuration that
make the client use Hearth's API with that model; ``--run`` starts the client with them, without
writing any of the client's files (a config the client reads only from a file goes to a private
temporary file for the run); ``--check`` runs it once on a tiny task and reports how the service
served it (``check.py``). The clients and their settings are in ``clients.py``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from runtime.config import DEFAULT_HOST, DEFAULT_PORT
from runtime.launch.clients import (BUILDERS, CLIENTS, NO_KEY, Client, Launch, aider, claude, cn, codex, describe,
                                    kilo, kilo_config, opencode, opencode_config, qwen)
from runtime.launch.model_choice import Choice, NoFit, choose, stored_models
from runtime.launch.service import Service, ServiceError

__all__ = ["BUILDERS", "CLIENTS", "NO_KEY", "Launch", "add_parser", "aider", "claude", "cn", "codex", "describe",
           "kilo", "kilo_config", "opencode", "opencode_config", "qwen", "run", "split_client_args"]


def add_parser(sub) -> None:
    p = sub.add_parser("launch", help="print (or --run, or --check) the settings that point a coding agent at Hearth",
                       epilog="Arguments after -- go to the client: hearth launch claude --run -- -p 'hello'")
    p.add_argument("client", choices=list(CLIENTS))
    p.add_argument("--host", default=DEFAULT_HOST, help="the service's address (default %(default)s)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="the service's port (default %(default)s)")
    p.add_argument("--model", help="the model to use (default: one whose context holds the client's first prompt "
                                   "and whose template does tool calls, the loaded one first)")
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
    try:
        status = _run(args)
        sys.stdout.flush()
    except BrokenPipeError:  # `hearth launch ... | head -1`: the reader has gone, and so does the rest
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return status


def _run(args: argparse.Namespace) -> int:
    from runtime.api_key import load_key
    from runtime.config import data_dir

    base_url = f"http://{args.host}:{args.port}"
    key = os.environ.get("HEARTH_API_KEY") or load_key(data_dir())
    spec = CLIENTS[args.client]
    service = Service(base_url, key)
    health = service.health()
    running = health is not None
    once = args.run or args.check  # the client runs now, and its end gives back what it held
    if args.check and not running:
        print(f"hearth: no Hearth service answers at {base_url}: start it with `hearth serve`", file=sys.stderr)
        return 2
    try:
        models = service.models() if running else stored_models(data_dir())
    except ServiceError as e:
        print(f"hearth: the service at {base_url} did not list its models: {e}", file=sys.stderr)
        return 1
    engine = (health or {}).get("engine", {})
    last = engine.get("model") or engine.get("default_model")  # the model in use, else the service's default
    choice = choose(spec, models, service if running else None, args.model, last if isinstance(last, str) else None)
    if isinstance(choice, NoFit):
        print(choice.message(), file=sys.stderr)
        return 1
    for warning in choice.warnings:
        print(f"hearth: warning: {warning}", file=sys.stderr)
    restore = None
    if choice.load_ctx is not None and not running:
        choice.notes.append(f"start the service with `hearth serve --model {choice.model} --ctx {choice.load_ctx}`")
    elif choice.load_ctx is not None:
        try:
            restore = hold(service, choice, once)
        except ServiceError as e:
            print(f"hearth: could not load {choice.model} with a {choice.load_ctx:,}-token context: {e}",
                  file=sys.stderr)
            return 1
    try:
        return _start(args, spec, base_url, key, choice, running)
    finally:
        if restore is not None and once:  # the client has ended: the model's keep-alive is what it was
            try:
                service.load(choice.model, keep_alive=restore)
            except ServiceError:
                pass  # the service has stopped, or unloaded the model: nothing to give back


def hold(service: Service, choice: Choice, for_run: bool) -> float | None:
    """Load the chosen model with ``choice.load_ctx`` and keep it loaded (a model unloaded after
    its keep-alive would come back with its default context); the keep-alive it had. ``for_run``:
    the caller gives that back when the client ends."""
    assert choice.load_ctx is not None
    loaded = service.load(choice.model, ctx=choice.load_ctx)
    had = loaded.get("keep_alive")
    service.load(choice.model, keep_alive=-1)
    served = loaded.get("max_request_tokens")
    if isinstance(served, int):
        choice.context = served
    default = f" (the service's default for it: {choice.default_ctx:,})" if choice.default_ctx else ""
    loaded_with = f"loaded {choice.model} with a {choice.load_ctx:,}-token context{default}"
    if for_run:
        choice.notes.append(f"{loaded_with}, kept loaded while the client runs")
    else:
        auth = f" -H 'Authorization: Bearer {service.key}'" if service.key else ""
        choice.notes.append(f"{loaded_with}, kept loaded until you unload it:\n"
                            f"  curl -X POST{auth} {service.base_url}/hearth/models/{choice.model}/unload\n"
                            f"or make it the default: hearth serve --ctx {choice.load_ctx}")
    return had if isinstance(had, (int, float)) else None


def _start(args: argparse.Namespace, spec: Client, base_url: str, key: str | None, choice: Choice,
           running: bool) -> int:
    client_args = getattr(args, "client_args", [])
    if args.check:
        from runtime.launch.check import run_check

        return run_check(args.client, base_url, choice.model, choice.context, key, args.timeout, client_args,
                         [choice.limits(spec), *choice.notes])
    launch = spec.build(base_url, choice.model, key, choice.context)
    if not args.run:
        launch.args += client_args
        print(describe(args.client, launch, choice.model, running, [choice.limits(spec), *choice.notes]))
        return 0
    for note in [choice.limits(spec), *choice.notes]:
        print("\n".join(f"# {line}" for line in note.splitlines()), file=sys.stderr)
    program = shutil.which(launch.program)
    if program is None:
        print(f"hearth: `{launch.program}` is not on PATH; install it ({spec.install}) or run "
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
