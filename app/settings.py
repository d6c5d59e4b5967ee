"""The app's settings: a small JSON file in the data directory, read at start, written on change."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from runtime.config import DEFAULT_HOST, DEFAULT_MODEL, DEFAULT_PORT, OLLAMA_PORT, EngineConfig

log = logging.getLogger("hearth.app")
KV_TYPES = ("f16", "q8_0", "q4_0")
THEMES = ("system", "light", "dark")
_SERVICE = EngineConfig()  # the service's defaults are the app's
#: The ``hearth serve`` options the app passes, and the setting each carries. The app owns this
#: list rather than reading the command's parser (it reaches the service only over HTTP and its
#: command line); a test parses the result with ``hearth serve``'s parser.
SERVE_FLAGS = (("--model", "default_model"), ("--ctx", "ctx"), ("--parallel", "parallel"),
               ("--kv-type", "kv_type"), ("--draft", "draft_model"))


@dataclass(slots=True)
class AppSettings:
    port: int = DEFAULT_PORT
    host: str = DEFAULT_HOST
    default_model: str = DEFAULT_MODEL
    draft_model: str = ""
    ctx: int = 0  #: 0: the service chooses per model (the trained context up to 32768 where it fits)
    parallel: int = _SERVICE.parallel
    kv_type: str = ""  #: "": the service chooses (f16, or q8_0 where only that holds the context)
    start_on_login: bool = False
    keep_in_tray: bool = True
    theme: str = "system"  #: one of THEMES: the OS's light or dark scheme, or always one of them
    told_no_tray: bool = False
    #: the first-run model suggestion was dismissed or used: it is not offered again
    suggestion_done: bool = False
    #: also serve the API on Ollama's port, for tools that look for Ollama there
    ollama_port: bool = False
    #: 2: a context of 0 and an empty KV type mean the service's choice (files before it wrote
    #: the old fixed defaults, 8192 and f16, which now read as that choice)
    version: int = 2

    def serve_args(self) -> list[str]:
        """Arguments for ``hearth serve`` that carry these settings (host and port apart): the
        flags in ``SERVE_FLAGS``, each given only when its setting is set."""
        args: list[str] = []
        for flag, name in SERVE_FLAGS:
            value = getattr(self, name)
            if value not in ("", None, 0):
                args += [flag, str(value)]
        if self.ollama_port:
            args += ["--ollama-port", str(OLLAMA_PORT)]
        return args

    def validate(self) -> str | None:
        """A sentence for the user when a value cannot work, else None."""
        if not 1 <= self.port <= 65535:
            return "The port must be a number from 1 to 65535."
        if not self.host.strip():
            return "The bind address must not be empty; 127.0.0.1 keeps the service on this computer."
        if self.ctx and self.ctx < 256:
            return "The context must be at least 256 tokens (or Automatic)."
        if not 1 <= self.parallel <= 64:
            return "Parallel requests must be between 1 and 64."
        if self.kv_type and self.kv_type not in KV_TYPES:
            return f"The KV type must be one of {', '.join(KV_TYPES)}."
        if self.theme not in THEMES:
            return f"The theme must be one of {', '.join(THEMES)}."
        return None


class SettingsStore:
    """Loads and saves ``AppSettings``; a damaged file falls back to the defaults and is kept aside."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> AppSettings:
        try:
            raw = json.loads(self.path.read_text())
        except FileNotFoundError:
            return AppSettings()
        except (OSError, ValueError) as e:
            log.warning("settings file %s unreadable (%s); using defaults", self.path, e)
            self.path.replace(self.path.with_suffix(".damaged"))
            return AppSettings()
        known = {f.name for f in fields(AppSettings)}
        settings = AppSettings()
        for key, value in raw.items() if isinstance(raw, dict) else ():
            if key in known and type(value) is type(getattr(settings, key)):
                setattr(settings, key, value)
        if isinstance(raw, dict) and raw.get("theme_follows_os") is False and "theme" not in raw:
            settings.theme = "light"  # a file from before the choice: "not following" meant light
        if isinstance(raw, dict) and raw.get("version", 1) == 1:  # the old fixed defaults: the service's choice now
            settings.ctx = 0 if settings.ctx == 8192 else settings.ctx
            settings.kv_type = "" if settings.kv_type == "f16" else settings.kv_type
            settings.version = 2
        if settings.theme not in THEMES:
            settings.theme = "system"
        return settings

    def save(self, settings: AppSettings) -> None:
        from runtime.private_files import write_private

        write_private(self.path, json.dumps(asdict(settings), indent=2))  # owner-only, atomic
