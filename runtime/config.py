"""Where Hearth keeps its files, and the service's settings."""

from __future__ import annotations

import os
from argparse import Namespace
from dataclasses import dataclass, field
from pathlib import Path

from runtime.api_key import is_loopback

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 4327
DEFAULT_MODEL = "smollm2-135m"
#: Ollama's port, where ``--ollama-port`` without a value also serves the API
OLLAMA_PORT = 11434


def data_dir() -> Path:
    """The user data directory (platformdirs), or ``$HEARTH_DATA_DIR`` when set; created
    owner-only (0700)."""
    override = os.environ.get("HEARTH_DATA_DIR")
    if override:
        path = Path(override)
    else:
        import platformdirs

        path = Path(platformdirs.user_data_dir("hearth", appauthor=False))
    from runtime.private_files import private_dir

    return private_dir(path)  # 0700: it holds the chat history, the keys and the model list


#: tokens of KV capacity where no fit plan chose one (the probe failed; an encoder's window)
DEFAULT_CTX = 8192

#: idle sequences a model with sliding-window layers keeps for the prefix cache beside its
#: running ones. llama.cpp sizes those layers' cells by the sequence count (``window * n_seq
#: + n_batch``), so each such sequence costs a window of cells on every sliding layer; a prefix
#: that no holder keeps comes back from the host tier (its cells and a checkpoint)
SWA_HOLDER_SEQS = 2


@dataclass(slots=True, frozen=True)
class EngineConfig:
    """How each local model's engine runs: the worker's context, batching and caches."""

    #: KV capacity in tokens, across a model's requests; None: chosen per model by the fit plan
    #: (the trained context up to 32768, smaller where memory is short; runtime/hardware/fit.py)
    ctx: int | None = None
    parallel: int = 4  #: requests decoded together
    n_batch: int = 512  #: token budget of one step
    threads: int = 0  #: CPU threads; 0: physical cores
    kv_type: str | None = None  #: None: f16, or q8_0 where only that holds the default context
    flash_attn: bool | None = None  #: None: llama.cpp's "auto"
    block_size: int = 16
    prefix_cache: bool = True
    cache_fraction: float = 0.0  #: share of the KV pool idle prefix cache may keep
    #: MiB of host memory for prefix cache evicted from the KV pool; None: a share of the RAM
    #: available once the model has loaded (runtime/engine/host_cache.py)
    cache_ram: int | None = None
    #: MiB of disk for the prompt cache that outlives a model's worker (all models together;
    #: never more than half the free space); 0: off
    cache_disk: int = 4096
    #: where that cache lives (the data directory's prompt-cache/); None: no disk tier
    cache_dir: Path | None = None
    #: speculative decoding: a draft model (catalog id or .gguf path), "ngram" or "off"; None: the
    #: catalog entry's ``draft`` for a catalog model, else off
    draft: str | None = None
    load_timeout: float = 600.0  #: seconds a model may take to load before its worker is killed
    #: intra-op threads of an embedding or reranking model's worker (kept small, so that a chat
    #: model decoding beside it keeps its speed)
    embed_threads: int = 2
    #: ggml RPC workers (``HOST:PORT``, ``hearth rpc-worker``) that lend their memory: a chat
    #: model's layers are split over them and this machine as the fit planner says
    rpc: tuple[str, ...] = ()


@dataclass(slots=True, frozen=True)
class ResidencyConfig:
    """Which models stay loaded (see runtime/server/models/router.py): several at once within a budget."""

    max_models: int | None = None  #: resident models at most; None: as many as the memory budget holds
    memory_budget: int | None = None  #: bytes per device (RAM, each GPU); None: what the planner deems safe
    load_wait: float = 60.0  #: seconds a request waits for busy models to make room before a 503
    keep_alive: float = 300.0  #: seconds a model stays loaded without requests; < 0: forever


def _env_float(name: str, default: float) -> float:
    """A positive number of seconds from the environment (``HEARTH_WRITE_TIMEOUT``), else ``default``."""
    try:
        value = float(os.environ.get(name, "").strip() or default)
    except ValueError:
        return default
    return value if value > 0 else default


def _env_int(name: str, default: int) -> int:
    """A whole number from the environment (``HEARTH_BODY_BUDGET_MB``...), else ``default``."""
    value = os.environ.get(name, "").strip()
    try:
        return max(0, int(float(value))) if value else default
    except ValueError:
        return default


@dataclass(slots=True, frozen=True)
class SecurityConfig:
    """Who may reach the API and how much one request may ask (see runtime/server/security.py)."""

    host: str = DEFAULT_HOST
    api_key: str | None = None
    cors_origins: tuple[str, ...] = ()
    #: folders whose .gguf files requests may name by path (the data directory always)
    models_dirs: tuple[Path, ...] = ()
    max_tokens_limit: int = 16384
    max_client_requests: int = 16  #: requests that run a model, in flight or queued, per client
    #: requests of any route one client may hold open at once, streams included
    max_client_held: int = 64
    #: whose prompts a request may read from the prefix cache: "shared" (every client's), "client"
    #: (its own client's only: ``cached_tokens`` then tells nobody what another client sent), or
    #: "auto": "client" when the service is bound off loopback, "shared" on it
    cache_isolation: str = "auto"
    #: a request body: room for a few photos as base64 (each image or clip is 20 MB at most)
    max_body_bytes: int = 32 * 1024 * 1024
    #: fetch images that a request names by web address (the service then makes requests on a
    #: client's behalf); off: only inline data is read
    fetch_media_urls: bool = False
    # connections (runtime/server/connections.py): nobody holds the door open
    header_timeout: float = 10.0  #: seconds a new connection has to send a complete request head
    body_timeout: float = 10.0  #: seconds a request body may go without a byte before it is dropped
    body_total_timeout: float = 120.0  #: seconds a whole request body may take after its head
    keepalive_timeout: float = 15.0  #: seconds an idle connection is kept open for the next request
    max_connections: int = 512  #: open connections; more close the oldest idle one
    #: seconds a response may wait on a client that reads none of it before its connection closes
    write_timeout: float = field(default_factory=lambda: _env_float("HEARTH_WRITE_TIMEOUT", 60.0))
    #: connections beyond ``max_connections`` kept for /health and for requests with the API key
    #: or the app's confirmation token, when every other connection holds a request
    reserved_connections: int = 32
    # request bodies (runtime/server/bodies.py): nobody holds the service's memory
    #: bytes a second a request body must keep up once its first ``body_timeout`` seconds have
    #: passed; one that falls ``body_timeout`` seconds behind (all of it but a little at once, then a
    #: byte now and then) gets 408 and its memory back. 0: only the stall and total timeouts
    body_min_rate: int = field(default_factory=lambda: _env_int("HEARTH_BODY_MIN_RATE", 32 * 1024))
    #: request-body bytes all requests together may hold while they arrive and are parsed (at least
    #: one body of ``max_body_bytes``); a body that would pass it gets 503 before it is read
    body_budget_bytes: int = field(default_factory=lambda: _env_int("HEARTH_BODY_BUDGET_MB", 256) * 2**20)
    #: the part of that budget one client address may hold (at least one body); beyond it 429
    client_body_bytes: int = field(default_factory=lambda: _env_int("HEARTH_CLIENT_BODY_BUDGET_MB", 128) * 2**20)

    @property
    def isolates_cache(self) -> bool:
        """Whether each client reads only its own prompts from the prefix cache."""
        if self.cache_isolation == "auto":
            return not is_loopback(self.host)
        return self.cache_isolation == "client"


@dataclass(slots=True, frozen=True)
class ServeConfig:
    """``hearth serve``'s settings, built once (``serve_config``) and handed down unchanged."""

    port: int = DEFAULT_PORT
    model: str = DEFAULT_MODEL  #: the default model: catalog id or .gguf path
    preload: bool = True  #: load the default model when the app starts
    data_dir: Path = field(default_factory=data_dir)
    #: also listen on this port (Ollama's, 11434), for tools that assume Ollama; None: off
    ollama_port: int | None = None
    shutdown_grace: float = 5.0  #: seconds open streams get to finish on SIGTERM
    engine: EngineConfig = field(default_factory=EngineConfig)
    residency: ResidencyConfig = field(default_factory=ResidencyConfig)
    security: SecurityConfig = field(default_factory=SecurityConfig)
    #: ``--chat-template-file``'s text: the default model renders with it instead of its own
    chat_template: str | None = None


def serve_config(args: Namespace, data_dir: Path, api_key: str | None = None) -> ServeConfig:
    """The one translation of ``hearth serve``'s options (runtime/cli.py, serve_options.py) into
    the config; ``api_key``: the key the options chose (``serve_options.serve_api_key``)."""
    engine = EngineConfig(
        ctx=args.ctx, parallel=args.parallel, n_batch=args.batch, threads=args.threads, kv_type=args.kv_type,
        flash_attn={"auto": None, "on": True, "off": False}[args.flash_attn], block_size=args.block_size,
        prefix_cache=not args.no_prefix_cache, cache_fraction=args.cache_fraction, cache_ram=args.cache_ram,
        cache_disk=args.cache_disk, cache_dir=data_dir / "prompt-cache",
        draft=args.draft, load_timeout=args.load_timeout, embed_threads=args.embed_threads,
        rpc=tuple(str(ep) for ep in args.rpc or ()))
    residency = ResidencyConfig(max_models=args.max_models, memory_budget=args.memory_budget,
                                load_wait=args.load_wait, keep_alive=args.keep_alive)
    security = SecurityConfig(
        host=args.host, api_key=api_key, cors_origins=tuple(args.cors_origin),
        models_dirs=tuple(Path(d).expanduser().resolve() for d in args.models_dir),
        max_tokens_limit=args.max_tokens_limit, max_client_requests=args.max_client_requests,
        max_client_held=args.max_client_held, cache_isolation=args.cache_isolation,
        max_body_bytes=int(args.max_body_mb * 1024 * 1024), header_timeout=args.header_timeout,
        fetch_media_urls=bool(getattr(args, "fetch_media_urls", False)),
        body_timeout=args.body_timeout, keepalive_timeout=args.idle_connection_timeout,
        max_connections=args.max_connections, body_min_rate=max(0, int(args.body_min_rate * 1024)),
        body_budget_bytes=int(max(0.0, args.body_budget_mb) * 2**20),
        client_body_bytes=int(max(0.0, args.client_body_budget_mb) * 2**20), write_timeout=args.write_timeout)
    return ServeConfig(port=args.port, model=args.model, preload=False, data_dir=data_dir,
                       ollama_port=args.ollama_port, shutdown_grace=args.shutdown_grace,
                       engine=engine, residency=residency, security=security,
                       chat_template=args.chat_template_file)
