"""Which model files a request may name: the API must not become a way to open any file.

A ``model`` that is a catalog or registered id is fine. A path is accepted only inside the
data directory or a models folder the user configured (``--models-dir``), after ``..`` and
``~`` are resolved; anything else is refused before the file is even looked at, so the
answer does not tell whether a file exists either. The default model given on the command
line is trusted as it is.
"""

from __future__ import annotations

import os
from pathlib import Path

from runtime.config import ServeConfig


class ModelPathRefused(PermissionError):
    pass


def looks_like_path(ref: str) -> bool:
    return (ref.endswith(".gguf") or "/" in ref or "\\" in ref or ref.startswith(("~", "."))
            or ".." in ref or (len(ref) > 1 and ref[1] == ":"))


def allowed_roots(config: ServeConfig) -> list[Path]:
    return [Path(os.path.abspath(p)) for p in (config.data_dir, *config.models_dirs)]


def check_model_ref(ref: str, config: ServeConfig, known_ids=()) -> None:
    """Raise ``ModelPathRefused`` if ``ref`` is a path outside the allowed folders."""
    if ref == config.model or ref in known_ids or not looks_like_path(ref):
        return
    if "\x00" in ref:
        raise ModelPathRefused("the model name contains a NUL character")
    path = Path(os.path.abspath(os.path.expanduser(ref)))
    for root in allowed_roots(config):
        if path.is_relative_to(root):
            return
    raise ModelPathRefused(
        f"model path {ref!r} is outside the folders this service may read models from "
        "(the data directory and the --models-dir folders); use a model id, or add the folder with --models-dir")
