"""``hearth remote add|list|rm|test``: the upstreams in the data directory, from the terminal.

The commands edit ``remotes.json`` (a running service reads it again on its next request) and
the OS keyring; ``test`` talks to the upstream itself, so it works with no service running.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

COMMAND = "remote"


def add_parser(sub) -> None:
    p = sub.add_parser(COMMAND, help="models served by another machine (vLLM, llama-server, Ollama, Hearth)")
    rsub = p.add_subparsers(dest="remote_command", required=True)
    a = rsub.add_parser("add", help="add an OpenAI-compatible upstream (prompts sent to it leave this computer)")
    a.add_argument("name", help="a short name for it, e.g. gpu-box")
    a.add_argument("url", help="its address, e.g. http://192.168.1.20:8000 (or .../v1)")
    a.add_argument("--key-from-env", metavar="VAR",
                   help="its API key is in the environment variable VAR of the service (never stored)")
    a.add_argument("--key-stdin", action="store_true",
                   help="read its API key from standard input and keep it in the OS keyring")
    a.add_argument("--allow-insecure-upstream", action="store_true",
                   help="allow plain HTTP to a host outside loopback and private networks")
    a.add_argument("--plain-names", action="store_true",
                   help="let requests name its models without @NAME (a local model of the same name still wins); "
                        "without it, only MODEL@NAME sends a prompt there")
    for t, default in (("connect", 5.0), ("first-byte", 120.0), ("idle", 60.0)):
        a.add_argument(f"--{t}-timeout", type=float, default=default, metavar="S",
                       help=f"seconds (default {default:g})")
    ls = rsub.add_parser("list", help="the upstreams and their models")
    ls.add_argument("--json", action="store_true")
    rm = rsub.add_parser("rm", help="remove an upstream (and its key from the keyring)")
    rm.add_argument("name")
    t = rsub.add_parser("test", help="ask an upstream for its models (and one token) now")
    t.add_argument("name")


def run(args: argparse.Namespace) -> int:
    from runtime.config import data_dir
    from runtime.remote.registry import Remotes

    remotes = Remotes(data_dir())
    return {"add": _add, "list": _list, "rm": _rm, "test": _test}[args.remote_command](args, remotes)


def _add(args, remotes) -> int:
    from runtime.remote.keys import KeyringUnavailable
    from runtime.remote.upstream import UpstreamRefused, make_upstream

    key = None
    if args.key_stdin:
        key = sys.stdin.readline().strip()
        if not key:
            print("hearth: no key on standard input", file=sys.stderr)
            return 1
    if args.key_from_env and args.key_stdin:
        print("hearth: give --key-from-env or --key-stdin, not both", file=sys.stderr)
        return 1
    if args.key_from_env and not os.environ.get(args.key_from_env):
        print(f"hearth: note: {args.key_from_env} is not set in this shell; the service must have it set",
              file=sys.stderr)
    try:
        up = make_upstream(args.name, args.url, key=f"env:{args.key_from_env}" if args.key_from_env else None,
                           allow_insecure=args.allow_insecure_upstream, plain_names=args.plain_names,
                           timeouts={"connect": args.connect_timeout, "first_byte": args.first_byte_timeout,
                                     "idle": args.idle_timeout})
        replaced = remotes.get(up.name) is not None
        remotes.add(up, key)
    except (UpstreamRefused, KeyringUnavailable) as e:
        print(f"hearth: {e}", file=sys.stderr)
        return 1
    errors = asyncio.run(_refresh(remotes, up.name))
    up = remotes.get(up.name)
    print(f"{'replaced' if replaced else 'added'} {up.name}: {up.url}  "
          f"(prompts to its models leave this computer, to {up.host})")
    if not up.plain_names:
        print(f"name its models MODEL@{up.name} (or add it with --plain-names to use their own names)")
    if errors.get(up.name):
        print(f"hearth: it could not be read now: {errors[up.name]} (kept; `hearth remote test {up.name}` "
              "tries again)", file=sys.stderr)
    else:
        print("models: " + (", ".join(up.model_ids()) or "none"))
    return 0


async def _refresh(remotes, name: str | None) -> dict:
    try:
        return await remotes.refresh(name)
    finally:
        await remotes.close()


def _list(args, remotes) -> int:
    rows = remotes.status()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no upstreams (remote engines are off): add one with `hearth remote add NAME URL`")
        return 0
    for r in rows:
        key = {"keyring": "key in the OS keyring", None: "no key"}.get(r["key"], f"key from ${r['key'][4:]}"
                                                                      if r["key"] else "no key")
        names = "plain names" if r.get("plain_names") else f"names MODEL@{r['name']}"
        print(f"{r['name']}  {r['url']}  ({key}; {names})")
        print("  models: " + (", ".join(r["models"]) or "none read yet"))
    return 0


def _rm(args, remotes) -> int:
    if not remotes.remove(args.name):
        print(f"hearth: no upstream named {args.name!r}", file=sys.stderr)
        return 1
    print(f"removed {args.name}")
    return 0


def _test(args, remotes) -> int:
    up = remotes.get(args.name)
    if up is None:
        print(f"hearth: no upstream named {args.name!r}", file=sys.stderr)
        return 1
    return asyncio.run(_probe(remotes, up.name))


async def _probe(remotes, name: str) -> int:
    from runtime.remote.remote_engine import RemoteEngine
    from runtime.sampling_params import SamplingParams

    try:
        t0 = time.perf_counter()
        err = (await remotes.refresh(name)).get(name)
        up = remotes.get(name)
        if err:
            print(f"{name}: {err}", file=sys.stderr)
            return 1
        print(f"{name}: {up.url} answers; models: {', '.join(up.model_ids()) or 'none'} "
              f"({(time.perf_counter() - t0) * 1000:.0f} ms)")
        if not up.models:
            return 0
        engine = RemoteEngine(remotes, up.models[0]["id"], name)
        t0 = time.perf_counter()
        try:
            [stream] = await engine.submit(SamplingParams(temperature=0.0, max_tokens=1),
                                           messages=[{"role": "user", "content": "Hi"}])
            async for _ in stream:
                pass
        except Exception as e:  # noqa: BLE001 - reported to the user as is
            print(f"{name}: a one-token chat with {up.models[0]['id']} failed: {e}", file=sys.stderr)
            return 1
        print(f"{name}: one-token chat with {up.models[0]['id']} in {(time.perf_counter() - t0) * 1000:.0f} ms")
        return 0
    finally:
        await remotes.close()
