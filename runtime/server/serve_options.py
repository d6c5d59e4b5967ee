"""``hearth serve``'s options for the API surface and its security, and ``hearth key``."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import fields
from pathlib import Path

from runtime.api_key import KeyRequired, create_key, key_path, load_key, remove_key, serve_key
from runtime.config import OLLAMA_PORT, EngineConfig, ResidencyConfig, SecurityConfig, ServeConfig
from runtime.server.models.keep_alive import parse_keep_alive


def _default(cls, name: str):
    return next(f.default for f in fields(cls) if f.name == name)


def _keep_alive(text: str) -> float | None:
    from runtime.server.errors import ApiError

    try:
        return parse_keep_alive(text)
    except ApiError as e:
        raise argparse.ArgumentTypeError(e.message) from None


def add_api_args(p: argparse.ArgumentParser) -> None:
    sec = SecurityConfig()  # the defaults are the config's
    g = p.add_argument_group("API and security")
    g.add_argument("--api-key", metavar="KEY|generate",
                   help="require this key ('generate': create one, store it in the data directory, print it); "
                        "default: $HEARTH_API_KEY or the stored key, if any. Needed to bind a non-loopback address")
    g.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="also allow browser requests from this origin (e.g. https://app.example); "
                        "localhost origins are always allowed; repeatable")
    g.add_argument("--models-dir", action="append", default=[], metavar="DIR",
                   help="a folder whose .gguf files requests may name by path (the data directory always); repeatable")
    keep_alive = os.environ.get("HEARTH_KEEP_ALIVE", f"{ResidencyConfig().keep_alive:g}")
    g.add_argument("--keep-alive", type=_keep_alive, default=keep_alive,
                   metavar="DURATION", help="unload a model after this long without requests (e.g. 5m, 30s; "
                                            "-1: never; default $HEARTH_KEEP_ALIVE or 5m)")
    g.add_argument("--max-tokens-limit", type=int, default=sec.max_tokens_limit, metavar="N",
                   help="largest max_tokens / num_predict a request may ask for (default %(default)s)")
    g.add_argument("--max-client-requests", type=int, default=sec.max_client_requests, metavar="N",
                   help="requests that run a model one client may have in flight or queued; more get 429 "
                        "(default %(default)s; on loopback a client is a machine account)")
    g.add_argument("--max-client-held", type=int, default=sec.max_client_held, metavar="N",
                   help="requests of any route one client may hold open at once, streams included; more get 429 "
                        "(default %(default)s)")
    g.add_argument("--cache-isolation", choices=("auto", "shared", "client"), default=sec.cache_isolation,
                   help="whose prompts a request may reuse from the prefix cache: every client's (shared), its "
                        "own client's only (client; then cached_tokens tells no client what another sent), or "
                        "auto: client when bound off loopback, shared on it (default %(default)s)")
    g.add_argument("--max-body-mb", type=float, default=sec.max_body_bytes / (1024 * 1024), metavar="MB",
                   help="largest request body in MiB; larger ones get 413 (default %(default)s)")
    g.add_argument("--fetch-media-urls", action="store_true",
                   help="fetch images that a request names by http(s) address (10 s, 20 MB each, 3 redirects); "
                        "off by default: the service would make requests on its clients' behalf")
    g.add_argument("--header-timeout", type=_positive, default=sec.header_timeout, metavar="SECONDS",
                   help="a new connection that has not sent a whole request head by then is closed "
                        "(default %(default)s)")
    g.add_argument("--body-timeout", type=_positive, default=sec.body_timeout, metavar="SECONDS",
                   help="a request body that stops arriving for this long is dropped with its connection "
                        "(default %(default)s)")
    g.add_argument("--body-min-rate", type=float, default=sec.body_min_rate / 1024, metavar="KIB_S",
                   help="KiB a second a request body must keep up once its first --body-timeout seconds have "
                        "passed; one that falls behind gets 408 (0: off; default %(default)g, $HEARTH_BODY_MIN_RATE "
                        "in bytes/s)")
    g.add_argument("--body-budget-mb", type=float, default=sec.body_budget_bytes / 2**20, metavar="MB",
                   help="request-body bytes all requests together may hold while they arrive; past it 503 "
                        "(default %(default)g, $HEARTH_BODY_BUDGET_MB)")
    g.add_argument("--client-body-budget-mb", type=float, default=sec.client_body_bytes / 2**20, metavar="MB",
                   help="the part of that budget one client may hold; past it 429 "
                        "(default %(default)g, $HEARTH_CLIENT_BODY_BUDGET_MB)")
    g.add_argument("--write-timeout", type=_positive, default=sec.write_timeout, metavar="SECONDS",
                   help="a response its client reads none of for this long closes its connection "
                        "(default %(default)g, $HEARTH_WRITE_TIMEOUT)")
    g.add_argument("--idle-connection-timeout", type=_positive, default=sec.keepalive_timeout, metavar="SECONDS",
                   help="how long an idle connection is kept open for its next request (default %(default)s)")
    g.add_argument("--max-connections", type=_count, default=sec.max_connections, metavar="N",
                   help="open connections at most; a new one closes the oldest idle one, and "
                        f"{sec.reserved_connections} more are kept for /health and the app (default %(default)s)")
    g.add_argument("--ollama-port", type=int, nargs="?", const=OLLAMA_PORT, default=None, metavar="PORT",
                   help=f"also serve the same API on this port (Ollama's is {OLLAMA_PORT}, the value without one), "
                        "for tools that expect Ollama there; off by default, refused at start when the port is taken")
    g.add_argument("--shutdown-grace", type=float, default=_default(ServeConfig, "shutdown_grace"), metavar="SECONDS",
                   help="on SIGTERM, how long open streams may run before they are ended (default %(default)s)")
    g.add_argument("--load-timeout", type=_positive, default=EngineConfig().load_timeout, metavar="SECONDS",
                   help="longest a model may take to load; its worker is then stopped and the request "
                        "gets 504 model_load_timeout (default %(default)s)")
    g.add_argument("--embed-threads", type=int, default=EngineConfig().embed_threads, metavar="N",
                   help="threads of an embedding or reranking model's worker (default %(default)s)")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def serve_api_key(args: argparse.Namespace, data_dir: Path) -> str | None:
    """The key the options choose (``serve_key``); exits with a message when the bind needs one."""
    try:
        key, note = serve_key(args.api_key, args.host, data_dir)
    except KeyRequired as e:
        print(f"hearth: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    if note:
        print(note, flush=True)
    return key


def add_key_command(sub) -> None:
    p = sub.add_parser("key", help="show (creating it if needed) the service's API key")
    p.add_argument("--rotate", action="store_true", help="replace the key with a new one")
    p.add_argument("--remove", action="store_true", help="delete the stored key (loopback-only use needs none)")


def key_command(args: argparse.Namespace, data_dir: Path) -> int:
    if args.remove:
        print(f"removed {key_path(data_dir)}" if remove_key(data_dir) else "no stored key")
        return 0
    existed = load_key(data_dir) is not None
    key = create_key(data_dir, rotate=args.rotate)
    if not existed or args.rotate:
        print(f"new API key, stored in {key_path(data_dir)} (readable by you only):", file=sys.stderr)
    print(key)
    return 0


def _size(text: str) -> int:
    from runtime.server.models.residency import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _count(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return n


def add_router_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("several models at once")
    g.add_argument("--max-models", type=_count, metavar="N",
                   help="keep at most N models loaded (default: as many as the memory budget holds)")
    g.add_argument("--memory-budget", type=_size, metavar="SIZE",
                   help="planned memory the loaded models may take on each device, RAM and each GPU "
                        "(e.g. 6G, 512M; default: what the fit planner deems safe on this machine)")
    g.add_argument("--load-wait", type=float, default=ResidencyConfig().load_wait, metavar="SECONDS",
                   help="how long a request for a model that does not fit waits for busy models to "
                        "finish before it gets 503 (default %(default)s)")

