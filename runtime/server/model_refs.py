"""Which model files a request may name: the API must not become a way to open any file.

Catalog ids, imported models' ids and Hugging Face references (resolved inside the Hugging
Face cache) are fine. A path is accepted only if it is a registered local model's file or lies
inside the data directory or a models folder the user configured (``--models-dir``), after
``..`` and ``~`` are resolved; anything else is refused before the file is even looked at,
so the answer does not tell whether a file exists either. A ``..`` segment in any reference
counts as a path. The default model given on the command line is trusted as it is.
"""

from __future__ import annotations

import os
from pathlib import Path

from runtime.config import ServeConfig


class ModelPathRefused(PermissionError):
    pass


def _is_path(ref: str) -> bool:
    from runtime.store.catalog import load_catalog
    from runtime.store.refs import BadReference, _looks_like_path, parse_ref

    if _looks_like_path(ref) or ".." in ref.replace("\\", "/").split("/") or "\x00" in ref:
        return True
    try:
        return parse_ref(ref, frozenset(load_catalog())).kind == "path"
    except BadReference:
        return False


def allowed_roots(config: ServeConfig) -> list[Path]:
    return [Path(os.path.abspath(p)) for p in (config.data_dir, *config.models_dirs)]


def _registered(path: Path, config: ServeConfig) -> bool:
    from runtime.store.registry import Registry

    try:
        return any(Path(m.path) == path for m in Registry(config.data_dir).models())
    except OSError:
        return False


def check_model_ref(ref: str, config: ServeConfig) -> None:
    """Raise ``ModelPathRefused`` if ``ref`` is a path outside the allowed files and folders.
    The operator's own ``--model`` and ``--draft`` are trusted: only requests are confined."""
    if ref in (config.model, config.draft) or not _is_path(ref):
        return
    if "\x00" in ref:
        raise ModelPathRefused("the model name contains a NUL character")
    path = Path(os.path.abspath(os.path.expanduser(ref)))
    if any(path.is_relative_to(root) for root in allowed_roots(config)) or _registered(path, config):
        return
    raise ModelPathRefused(
        f"model path {ref!r} is outside the folders this service may read models from "
        "(the data directory and the --models-dir folders) and is not a registered model; "
        "use a model id, import the file (hearth import), or add its folder with --models-dir")
