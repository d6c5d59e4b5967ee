"""Where Hearth keeps its files, and the service's settings."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 4327
DEFAULT_MODEL = "smollm2-135m"


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


@dataclass(slots=True)
class ServeConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    model: str = DEFAULT_MODEL
    parallel: int = 4
    ctx: int = 8192
    n_batch: int = 512
    threads: int = 0
    kv_type: str = "f16"
    flash_attn: bool | None = None
    block_size: int = 16
    prefix_cache: bool = True
    cache_fraction: float = 0.0
    cache_ram: int = 512
    preload: bool = True
    #: speculative decoding: a draft model (catalog id or .gguf path) or "ngram"; None: the
    #: catalog entry's ``draft`` for a catalog model, else off
    draft: str | None = None
    data_dir: Path = field(default_factory=data_dir)
    # API surface and security (see runtime/server/security.py)
    api_key: str | None = None
    cors_origins: list[str] = field(default_factory=list)
    models_dirs: list[Path] = field(default_factory=list)
    keep_alive: float = 300.0  # seconds a model stays loaded without requests; < 0: forever
    max_tokens_limit: int = 16384
    max_client_requests: int = 16  # in flight or queued per client address
    max_body_bytes: int = 8 * 1024 * 1024
    shutdown_grace: float = 5.0  # seconds open streams get to finish on SIGTERM
    load_timeout: float = 600.0  # seconds a model may take to load before its worker is killed
    #: also listen on this port (Ollama's, 11434), for tools that assume Ollama; None: off
    ollama_port: int | None = None
    # Residency (see runtime/server/router.py): several models loaded at once within a budget
    max_models: int | None = None  # resident models at most; None: as many as the memory budget holds
    memory_budget: int | None = None  # bytes per device (RAM, each GPU); None: what the planner deems safe
    load_wait: float = 60.0  # seconds a request waits for busy models to make room before a 503
