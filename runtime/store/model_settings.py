"""How the user asked for one model to be loaded: its context, its layers on the GPU and its KV
cache type, as LM Studio's per-model load settings keep them.

One file per model, ``<data dir>/model-settings/<model id>.json`` (named as the stored chat
templates are: ``model_templates.model_file_name``), owner-only. Each field is optional: a field
not set is the service's choice (the fit plan's, ``--ctx``, ``--kv-type``). A request's own context
(Ollama's ``num_ctx``) still wins over the stored one. A file that is damaged or holds values out
of range is ignored with a warning in the log, never fatal: the model loads as if none were stored.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from runtime.private_files import private_dir, write_private
from runtime.store.model_templates import model_file_name

log = logging.getLogger("hearth.store")
SETTINGS_DIR = "model-settings"
KV_TYPES = ("f16", "q8_0", "q4_0")
#: the range a stored context may take (llama.cpp's smallest useful one; far past any model's)
MIN_CTX, MAX_CTX = 256, 1 << 22
MAX_GPU_LAYERS = 1000
MAX_FILE_BYTES = 4096


class BadLoadSettings(ValueError):
    """A value that cannot be stored: which field, and why (``field``)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(slots=True, frozen=True)
class LoadSettings:
    """None: the service's choice."""

    ctx: int | None = None
    gpu_layers: int | None = None
    kv_type: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def empty(self) -> bool:
        return self.ctx is None and self.gpu_layers is None and self.kv_type is None


def _int(value: object, field: str, lo: int, hi: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise BadLoadSettings(f"'{field}' must be a whole number from {lo} to {hi}, or null (the service's choice)",
                              field)
    return value


def parse_settings(body: object) -> LoadSettings:
    """``{"ctx": ..., "gpu_layers": ..., "kv_type": ...}`` (each optional, null: the service's
    choice) as settings; ``BadLoadSettings`` naming the field otherwise."""
    if not isinstance(body, dict):
        raise BadLoadSettings("the body must be an object: {\"ctx\": 32768, \"gpu_layers\": null, \"kv_type\": \"q8_0\"}",
                              "body")
    unknown = sorted(set(body) - {"ctx", "gpu_layers", "kv_type"})
    if unknown:
        raise BadLoadSettings(f"unknown field {unknown[0]!r}: a model's load settings are ctx, gpu_layers and kv_type",
                              unknown[0])
    kv = body.get("kv_type")
    if kv is not None and kv not in KV_TYPES:
        raise BadLoadSettings(f"'kv_type' must be one of {', '.join(KV_TYPES)}, or null", "kv_type")
    return LoadSettings(_int(body.get("ctx"), "ctx", MIN_CTX, MAX_CTX),
                        _int(body.get("gpu_layers"), "gpu_layers", 0, MAX_GPU_LAYERS), kv)


def settings_path(data_dir: Path, model_id: str) -> Path:
    return data_dir / SETTINGS_DIR / f"{model_file_name(model_id)}.json"


def stored_settings(data_dir: Path, model_id: str) -> LoadSettings:
    """What is stored for ``model_id`` (all None: nothing, or a file that could not be trusted,
    which is logged). Blocking."""
    path = settings_path(data_dir, model_id)
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise BadLoadSettings(f"{path.stat().st_size} bytes", "file")
        return parse_settings(json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        return LoadSettings()
    except (OSError, ValueError, RecursionError) as e:  # BadLoadSettings and JSONDecodeError are ValueErrors
        log.warning("ignoring the load settings stored for %s in %s: %s", model_id, path, e)
        return LoadSettings()


def store_settings(data_dir: Path, model_id: str, settings: LoadSettings) -> None:
    """Keep ``settings`` for ``model_id``; settings with nothing set remove the file. Blocking."""
    if settings.empty:
        remove_settings(data_dir, model_id)
        return
    private_dir(data_dir / SETTINGS_DIR)
    write_private(settings_path(data_dir, model_id), json.dumps(settings.to_dict()))


def remove_settings(data_dir: Path, model_id: str) -> bool:
    try:
        settings_path(data_dir, model_id).unlink()
    except FileNotFoundError:
        return False
    return True
