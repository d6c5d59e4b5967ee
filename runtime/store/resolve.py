"""A model reference (API ``model``, CLI) to a local file, checked to be a complete GGUF.

References are parsed by ``runtime.store.refs``: a catalog id (``id`` or ``id:QUANT``), an
imported model's id, a Hugging Face ``owner/repo[:QUANT]`` or ``owner/repo/file.gguf``
found in the Hugging Face cache, or a local path. Nothing here touches the network: a model
that is not local raises ``UnknownModel`` saying how to pull it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runtime.store.catalog import CatalogEntry, load_catalog
from runtime.store.embedded import embedded_path, ensure_embedded
from runtime.store.gguf_file import InvalidModelFile, read_header
from runtime.store.gguf_names import is_auxiliary, quant_of, split_part
from runtime.store.hf_cache import cached_ggufs, find_snapshot
from runtime.store.hub import PREFERRED_QUANTS
from runtime.store.refs import BadReference, ModelRef, parse_ref


class UnknownModel(LookupError):
    pass


@dataclass(slots=True, frozen=True)
class ResolvedModel:
    id: str
    path: Path


def _checked(model_id: str, path: Path) -> ResolvedModel:
    read_header(path)  # raises InvalidModelFile with the reason
    return ResolvedModel(model_id, path)


def _catalog(entry: CatalogEntry, quant: str | None, data_dir: Path) -> ResolvedModel:
    if entry.embedded is not None:
        if quant is not None and quant != entry.default_quant:
            raise UnknownModel(f"{entry.id} ships as {entry.default_quant} only")
        path = embedded_path(entry, data_dir)
        if not path.is_file():
            path = ensure_embedded(entry, data_dir)
        return ResolvedModel(entry.id, path)
    quant = quant or entry.default_quant
    spec = entry.quant_files(quant)
    if spec is None:
        raise UnknownModel(f"{entry.id} has no {quant}; the catalog lists {', '.join(entry.quants)}")
    path = find_snapshot(entry.repo, spec[0])
    model_id = entry.id if quant == entry.default_quant else f"{entry.id}:{quant}"
    if path is None:
        raise UnknownModel(f"model {model_id!r} is in the catalog but not downloaded: run `hearth pull {model_id}`")
    return _checked(model_id, path)


def _hub(ref: ModelRef) -> ResolvedModel:
    if ref.filename is not None:
        part = split_part(ref.filename)
        name = part.name(1) if part else ref.filename
        path = find_snapshot(ref.repo_id, name)
        if path is None:
            raise UnknownModel(f"{ref.repo_id}/{name} is not downloaded: run `hearth pull {ref.repo_id}/{name}`")
        return _checked(f"{ref.repo_id}/{name}", path)
    files = [(name, path) for repo, name, path in cached_ggufs() if repo == ref.repo_id
             and not is_auxiliary(name) and (split_part(name) is None or split_part(name).index == 1)]
    wanted = [ref.quant] if ref.quant else list(PREFERRED_QUANTS)
    for q in wanted:
        for name, path in files:
            if quant_of(name) == q:
                return _checked(f"{ref.repo_id}/{name}", path)
    if files and ref.quant is None:
        name, path = files[0]
        return _checked(f"{ref.repo_id}/{name}", path)
    raise UnknownModel(f"{ref.canonical} is not downloaded: run `hearth pull {ref.canonical}`")


def resolve_model(ref: str, data_dir: Path) -> ResolvedModel:
    """Find the model file for ``ref`` and check it is a complete GGUF before any load."""
    catalog = load_catalog()
    from runtime.store.registry import Registry

    for m in Registry(data_dir).imported():
        if m.id == ref:
            return _checked(m.id, Path(m.path))
    try:
        parsed = parse_ref(ref, frozenset(catalog))
    except BadReference as e:
        raise UnknownModel(str(e)) from None
    if parsed.kind == "catalog":
        return _catalog(catalog[parsed.catalog_id], parsed.quant, data_dir)
    if parsed.kind == "hub":
        return _hub(parsed)
    path = parsed.path
    if not path.is_file():
        raise UnknownModel(f"model file {ref!r} does not exist")
    path = path.resolve()
    return _checked(str(path), path)


__all__ = ["InvalidModelFile", "ResolvedModel", "UnknownModel", "resolve_model"]
