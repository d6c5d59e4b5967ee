"""A model reference (API ``model``, CLI) to a local file, checked to be a complete GGUF.

References are parsed by ``runtime.store.refs``: a catalog id (``id`` or ``id:QUANT``), an
imported model's id, a Hugging Face ``owner/repo[:QUANT]`` or ``owner/repo/file.gguf``
found in the Hugging Face cache, or a local path. Nothing here touches the network: a model
that is not local raises ``UnknownModel`` saying how to pull it.

This is the one place that decides which file a reference opens. With a ``Confinement``
(every request to the service), the file is accepted only when its real path, after
``..``, ``~`` and every symlink are resolved (``os.path.realpath``), lies inside one of the
allowed folders (the data directory, the ``--models-dir`` folders, the Hugging Face cache) or
is a registered imported file; the operator's own ``--model`` and ``--draft`` are trusted as
given. The refusal reads the same whether or not the file exists. Without one (the CLI, run
by the user at the terminal), any file may be named.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from runtime.store.catalog import CatalogEntry, load_catalog
from runtime.store.embedded import embedded_path, ensure_embedded
from runtime.store.gguf_file import InvalidModelFile, cached_header
from runtime.store.gguf_names import PREFERRED_QUANTS, is_auxiliary, quant_of, split_part
from runtime.store.hf_cache import cache_dir, cached_ggufs, find_snapshot
from runtime.store.onnx_model import InvalidOnnxModel, is_onnx_path, read_onnx_model
from runtime.store.refs import BadReference, ModelRef, normalise_ref, parse_ref


class UnknownModel(LookupError):
    pass


#: True while the service answers a request that must not write (a GET): an embedded model that
#: is not yet in the data directory is then "not yet available" instead of copied there (a web
#: page's <img> must not make the service write hundreds of MiB). Threads started with
#: ``asyncio.to_thread`` see the request's value.
READ_ONLY: ContextVar[bool] = ContextVar("hearth_read_only", default=False)


class ModelPathRefused(PermissionError):
    """The reference leads to a file outside the folders a request may read models from."""


@dataclass(slots=True, frozen=True)
class Confinement:
    """Where a request's model may come from: ``roots`` (real paths) and ``trusted`` references."""

    roots: tuple[Path, ...]
    trusted: frozenset[str] = frozenset()

    @classmethod
    def of(cls, data_dir: Path, models_dirs=(), trusted=()) -> "Confinement":
        roots = (data_dir, *models_dirs, cache_dir())
        return cls(tuple(Path(os.path.realpath(os.path.expanduser(r))) for r in roots),
                   frozenset(t for t in trusted if t))

    def allows(self, path: Path, data_dir: Path) -> bool:
        real = Path(os.path.realpath(path))
        if any(real.is_relative_to(root) for root in self.roots):
            return True
        from runtime.store.registry import Registry

        return any(Path(os.path.realpath(m.path)) == real for m in Registry(data_dir).imported())


def _refused(ref: str) -> ModelPathRefused:
    return ModelPathRefused(
        f"model {ref!r} is outside the folders this service may read models from (the data directory, "
        "the Hugging Face cache and the --models-dir folders) and is not an imported model; use a model "
        "id, import the file (hearth import, or the app), or add its folder with --models-dir")


@dataclass(slots=True, frozen=True)
class ResolvedModel:
    id: str
    path: Path


def _checked(model_id: str, path: Path) -> ResolvedModel:
    if is_onnx_path(path):  # an ONNX encoder: its tokenizer must be beside it
        try:
            read_onnx_model(path)
        except InvalidOnnxModel as e:
            raise InvalidModelFile(str(e)) from None
        return ResolvedModel(model_id, path)
    cached_header(path)  # raises InvalidModelFile with the reason
    return ResolvedModel(model_id, path)


def _found(model_id: str, path: Path) -> ResolvedModel:
    return ResolvedModel(model_id, path)


def _catalog(entry: CatalogEntry, quant: str | None, data_dir: Path) -> ResolvedModel:
    if entry.embedded is not None:
        if quant is not None and quant != entry.default_quant:
            raise UnknownModel(f"{entry.id} ships as {entry.default_quant} only")
        path = embedded_path(entry, data_dir)
        if not path.is_file():
            if READ_ONLY.get():
                raise UnknownModel(f"model {entry.id} is not yet available: it is placed in the data directory on "
                                   "its first use (a chat, or loading it)")
            path = ensure_embedded(entry, data_dir)
        return ResolvedModel(entry.id, path)
    quant = quant or entry.default_quant
    spec = entry.quant_files(quant) if quant is not None else None
    if spec is None:
        raise UnknownModel(f"{entry.id} has no {quant}; the catalog lists {', '.join(entry.quants)}")
    assert entry.repo is not None  # parse_catalog requires a repo of every entry
    snapshot = find_snapshot(entry.repo, spec[0])
    model_id = entry.id if quant == entry.default_quant else f"{entry.id}:{quant}"
    if snapshot is None:
        raise UnknownModel(f"model {model_id!r} is in the catalog but not downloaded: run `hearth pull {model_id}`")
    return _found(model_id, snapshot)


def _hub(ref: ModelRef) -> ResolvedModel:
    assert ref.repo_id is not None  # parse_ref sets it for every hub reference
    if ref.filename is not None:
        part = split_part(ref.filename)
        name = part.name(1) if part else ref.filename
        path = find_snapshot(ref.repo_id, name)
        if path is None:
            raise UnknownModel(f"{ref.repo_id}/{name} is not downloaded: run `hearth pull {ref.repo_id}/{name}`")
        return _found(f"{ref.repo_id}/{name}", path)
    files = [(name, path) for repo, name, path in cached_ggufs() if repo == ref.repo_id
             and not is_auxiliary(name) and ((first := split_part(name)) is None or first.index == 1)]
    wanted = [ref.quant] if ref.quant else list(PREFERRED_QUANTS)
    for q in wanted:
        for name, path in files:
            if quant_of(name) == q:
                return _found(f"{ref.repo_id}/{name}", path)
    if files and ref.quant is None:
        name, path = files[0]
        return _found(f"{ref.repo_id}/{name}", path)
    raise UnknownModel(f"{ref.canonical} is not downloaded: run `hearth pull {ref.canonical}`")


def resolve_model(ref: str, data_dir: Path, confine: Confinement | None = None) -> ResolvedModel:
    """Find the model file for ``ref`` and check it is a complete GGUF before any load.

    Raises ``UnknownModel``, ``InvalidModelFile`` or (with ``confine``) ``ModelPathRefused``.
    Blocking (it reads the file's header): call it from a thread in async code."""
    try:
        ref = normalise_ref(ref)
    except BadReference as e:
        raise UnknownModel(str(e)) from None
    if confine is not None and ref in confine.trusted:
        confine = None  # the operator's own --model / --draft
    model = _locate(ref, data_dir, confine is None)
    if confine is not None and not confine.allows(model.path, data_dir):
        raise _refused(ref)
    if not model.path.is_file():
        raise UnknownModel(f"model file {ref!r} does not exist")
    # The path keeps its name (a split model's parts are found beside it by name); its real
    # path was checked above.
    return _checked(model.id, model.path)


def _locate(ref: str, data_dir: Path, probe: bool) -> ResolvedModel:
    """The file ``ref`` names, not yet checked (nor, for a path, known to exist)."""
    catalog = load_catalog()
    from runtime.store.registry import Registry

    if ref not in catalog:  # an imported model never shadows a catalog id
        for m in Registry(data_dir).imported():
            if m.id == ref:
                return ResolvedModel(m.id, Path(m.path))
    try:
        parsed = parse_ref(ref, frozenset(catalog), probe=probe)
    except BadReference as e:
        raise UnknownModel(str(e)) from None
    if parsed.kind == "catalog":
        assert parsed.catalog_id is not None  # parse_ref sets it for every catalog reference
        return _catalog(catalog[parsed.catalog_id], parsed.quant, data_dir)
    if parsed.kind == "hub":
        return _hub(parsed)
    assert parsed.path is not None  # parse_ref sets it for every path reference
    path = Path(os.path.abspath(parsed.path))
    return ResolvedModel(str(path), path)


__all__ = ["Confinement", "InvalidModelFile", "ModelPathRefused", "ResolvedModel", "UnknownModel", "resolve_model"]
