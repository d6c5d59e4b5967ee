"""A model's shape for the fit planner: from its file when local, else from the catalog's numbers.

A catalog model that is not downloaded is sized from its architecture numbers and its file
size (the catalog's, or parameters x the quantization's bits per weight), so ``hearth fit``
and the catalog's fit badges answer before anything is downloaded.

Either way the shape carries the model's multimodal projector (``projector_bytes``), which the
worker loads beside it: the ``mmproj`` file next to a local model (``projector_for``), or the
one the catalog names with its size.
"""

from __future__ import annotations

from pathlib import Path

from runtime.hardware.catalog_shape import shape_from_catalog
from runtime.hardware.repack import estimated_matmuls
from runtime.hardware.shape import ModelShape, shape_from_header
from runtime.store.catalog import CatalogEntry, load_catalog
from runtime.store.gguf_file import cached_header, read_header
from runtime.store.gguf_names import split_part
from runtime.store.projector import projector_for
from runtime.store.refs import BadReference, parse_ref
from runtime.store.resolve import Confinement, UnknownModel, resolve_model


def catalog_shape(entry: CatalogEntry, quant: str | None = None) -> ModelShape | None:
    """The estimated shape of a catalog model at ``quant`` (None when the catalog lacks the numbers)."""
    size = entry.estimated_bytes(quant)
    if size is None or "shape" not in entry.raw:
        return None
    sized = CatalogEntry(entry.id, entry.name, entry.family, entry.license, entry.context_length,
                         {**entry.raw, "shape": {**entry.raw["shape"], "file_bytes": size}})
    shape = shape_from_catalog(sized)
    shape.matmuls = estimated_matmuls(quant or entry.raw.get("default_quant"), shape.layer_bytes)
    if entry.mmproj is not None:
        shape.projector_bytes = entry.mmproj[1] or 0
    return shape


def shape_of_file(path: str | Path) -> ModelShape:
    """The shape of a local GGUF; for a split model, the tensors of all its parts (beside it);
    with the projector beside it, if any (the one the worker loads)."""
    path = Path(path)
    part = split_part(path.name)
    header = cached_header(path) if part is None or part.count == 1 else read_header(path)  # the parts' are added to it
    if part is not None and part.count > 1:
        for name in part.names():
            if name != path.name:
                other = read_header(path.parent / name)  # a missing part raises InvalidModelFile
                header.tensors.extend(other.tensors)
                header.file_size += other.file_size
    shape = shape_from_header(header)
    projector = projector_for(path)
    if projector is not None:
        try:
            shape.projector_bytes = projector.path.stat().st_size
        except OSError:  # gone since it was read: the worker will not load it either
            pass
    return shape


def model_shape(ref: str, data_dir: Path, confine: Confinement | None = None) -> ModelShape:
    """The shape of ``ref``; raises ``UnknownModel``, ``InvalidModelFile`` or (with
    ``confine``) ``ModelPathRefused`` with the reason. Blocking: call it from a thread."""
    try:
        return shape_of_file(resolve_model(ref, data_dir, confine).path)
    except UnknownModel as missing:
        catalog = load_catalog()
        try:
            parsed = parse_ref(ref, frozenset(catalog), probe=confine is None)
        except BadReference:
            raise missing from None
        shape = (catalog_shape(catalog[parsed.catalog_id], parsed.quant)
                 if parsed.kind == "catalog" and parsed.catalog_id is not None else None)
        if shape is None:
            raise missing from None
        return shape
