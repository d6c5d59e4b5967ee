"""A request's ``model`` field to a file: a catalog id, or a local ``.gguf`` path."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runtime.store.catalog import load_catalog
from runtime.store.embedded import embedded_path, ensure_embedded
from runtime.store.gguf_file import InvalidModelFile, read_header


class UnknownModel(LookupError):
    pass


@dataclass(slots=True, frozen=True)
class ResolvedModel:
    id: str
    path: Path



def resolve_model(ref: str, data_dir: Path) -> ResolvedModel:
    """Find the model file for ``ref`` and check it is a complete GGUF before any load."""
    catalog = load_catalog()
    entry = catalog.get(ref)
    if entry is not None and entry.embedded is not None:
        path = embedded_path(entry, data_dir)
        if not path.is_file():
            path = ensure_embedded(entry, data_dir)
        return ResolvedModel(entry.id, path)
    if entry is not None:
        raise UnknownModel(f"model {ref!r} is in the catalog but not downloaded")
    if ref.endswith(".gguf"):
        path = Path(ref).expanduser()
        if not path.is_file():
            raise UnknownModel(f"model file {ref!r} does not exist")
        read_header(path)  # raises InvalidModelFile with the reason
        return ResolvedModel(str(path.resolve()), path.resolve())
    raise UnknownModel(
        f"unknown model {ref!r}: use one of {', '.join(sorted(catalog))} or a path to a .gguf file"
    )


__all__ = ["InvalidModelFile", "ResolvedModel", "UnknownModel", "resolve_model"]
