"""The local models: embedded, downloaded (any GGUF in the Hugging Face cache) and imported.

Downloads are not recorded anywhere else: the cache is the record, so a GGUF that another
tool put there is listed like Hearth's own. Imported files are kept by reference (no copy)
in ``imports.json`` in the data directory, after their header was read and checked.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from runtime.first_use import sole_writer
from runtime.private_files import move_aside, private_dir, write_private
from runtime.store.catalog import CatalogEntry, load_catalog
from runtime.store.embedded import embedded_path
from runtime.store.gguf_file import InvalidModelFile, read_header
from runtime.store.gguf_names import is_auxiliary, quant_of, split_part
from runtime.store.hf_cache import cache_dir, cached_ggufs, repo_dir

IMPORTS_FILE = "imports.json"
log = logging.getLogger("hearth.store")


class ModelNotFound(LookupError):
    pass


@dataclass(slots=True)
class LocalModel:
    id: str
    name: str
    source: str  #: embedded | hub | imported
    path: str
    size: int  #: bytes on disk, all parts of a split model
    quant: str | None = None
    repo: str | None = None
    file: str | None = None
    catalog_id: str | None = None
    parts: int = 1

    def to_dict(self) -> dict:
        return asdict(self)


def _catalog_index(catalog: dict[str, CatalogEntry]) -> dict[tuple[str, str], tuple[CatalogEntry, str]]:
    out: dict[tuple[str, str], tuple[CatalogEntry, str]] = {}
    for e in catalog.values():
        for q in e.quants:
            spec = e.quant_files(q)
            assert e.repo is not None and spec is not None  # parse_catalog checks both; q is one of its quants
            out[(e.repo, spec[0])] = (e, q)
    return out


def _parts_size(path: Path) -> tuple[int, int]:
    part = split_part(path.name)
    if part is None:
        return path.stat().st_size, 1
    sizes = [(path.parent / n).stat().st_size for n in part.names() if (path.parent / n).is_file()]
    return sum(sizes), len(sizes)


class Registry:
    def __init__(self, data_dir: Path, cache_root: Path | None = None) -> None:
        self.data_dir = data_dir
        self.cache_root = cache_root

    @property
    def root(self) -> Path:
        return self.cache_root or cache_dir()

    # --- listing ----------------------------------------------------------------------------
    def models(self) -> list[LocalModel]:
        catalog = load_catalog()
        out = [m for e in catalog.values() if e.embedded is not None
               for m in [self._embedded(e)] if m is not None]
        out += self._downloaded(catalog)
        out += self._downloaded_onnx(catalog)
        out += self.imported()
        return out

    def imported(self) -> list[LocalModel]:
        fields = set(LocalModel.__slots__)
        return [LocalModel(**{k: v for k, v in row.items() if k in fields})
                for row in self._imports() if Path(row["path"]).is_file()]

    def embedded_model(self, e: CatalogEntry) -> LocalModel:
        """An embedded model, placed in the data directory or not yet (size 0: its first use places it)."""
        path = embedded_path(e, self.data_dir)
        size = path.stat().st_size if path.is_file() else 0
        return LocalModel(e.id, e.name, "embedded", str(path), size, e.default_quant, e.repo, None, e.id)

    def _embedded(self, e: CatalogEntry) -> LocalModel | None:
        m = self.embedded_model(e)
        return m if Path(m.path).is_file() else None

    def _downloaded(self, catalog: dict[str, CatalogEntry]) -> list[LocalModel]:
        index = _catalog_index(catalog)
        out = []
        for repo, name, path in cached_ggufs(self.root):
            part = split_part(name)
            if is_auxiliary(name) or (part is not None and part.index != 1):
                continue
            size, parts = _parts_size(path)
            hit = index.get((repo, name))
            if hit is not None:
                e, q = hit
                mid = e.id if q == e.default_quant else f"{e.id}:{q}"
                out.append(LocalModel(mid, e.name, "hub", str(path), size, q, repo, name, e.id, parts))
            else:
                out.append(LocalModel(f"{repo}/{name}", name.rsplit("/", 1)[-1], "hub", str(path), size,
                                      quant_of(name), repo, name, None, parts))
        return out

    def _downloaded_onnx(self, catalog: dict[str, CatalogEntry]) -> list[LocalModel]:
        """The ONNX catalog models (embedders, rerankers) whose graph is in the cache."""
        from runtime.store.hf_cache import find_snapshot

        out = []
        for e in catalog.values():
            if e.raw.get("format") != "onnx" or e.embedded is not None:
                continue
            for q in e.quants:
                spec = e.quant_files(q)
                assert e.repo is not None and spec is not None  # parse_catalog checks both; q is one of its quants
                name = spec[0]
                path = find_snapshot(e.repo, name, self.root)
                if path is not None and path.is_file():
                    mid = e.id if q == e.default_quant else f"{e.id}:{q}"
                    out.append(LocalModel(mid, e.name, "hub", str(path), path.stat().st_size, q, e.repo, name, e.id))
        return out

    def find(self, model_id: str) -> LocalModel:
        for m in self.models():
            if m.id == model_id:
                return m
        raise ModelNotFound(f"no local model {model_id!r} (hearth list shows them)")

    def disk_usage(self) -> dict:
        models = self.models()
        by_source: dict[str, int] = {}
        for m in models:
            by_source[m.source] = by_source.get(m.source, 0) + m.size
        root = self.root
        probe = root if root.exists() else self.data_dir
        return {"models_bytes": sum(m.size for m in models), "by_source": by_source,
                "cache_dir": str(root), "free_bytes": shutil.disk_usage(probe).free}

    # --- import -----------------------------------------------------------------------------
    def _imports_path(self) -> Path:
        return self.data_dir / IMPORTS_FILE

    def _imports(self) -> list[dict]:
        """The rows of ``imports.json``; a damaged file is moved aside, its readable rows kept."""
        p = self._imports_path()
        try:
            raw = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as e:
            return self._damaged(p, str(e), [])
        try:
            rows = json.loads(raw)["models"]
            if not isinstance(rows, list):
                raise TypeError("'models' is not a list")
        except (ValueError, KeyError, TypeError) as e:
            return self._damaged(p, str(e) or type(e).__name__, [])
        good = [r for r in rows if isinstance(r, dict) and isinstance(r.get("id"), str)
                and isinstance(r.get("path"), str)]
        if len(good) < len(rows):
            return self._damaged(p, f"{len(rows) - len(good)} unreadable entries", good)
        return good

    def _damaged(self, p: Path, reason: str, keep: list[dict]) -> list[dict]:
        try:
            move_aside(p, reason)
            if keep:
                self._write_imports(keep)
        except OSError as e:
            log.warning("cannot set aside %s: %s", p, e)
        return keep

    def _write_imports(self, rows: list[dict]) -> None:
        write_private(self._imports_path(), json.dumps({"models": rows}, indent=1))

    def import_file(self, path: str | Path) -> LocalModel:
        """Register a local GGUF by reference; raises ``InvalidModelFile`` for a broken file."""
        p = Path(str(path).strip()).expanduser()
        if not p.is_file():
            raise InvalidModelFile(f"{p} does not exist or is not a file")
        p = p.resolve()  # kept by its real path: a symlink swapped later cannot redirect it
        if p.suffix.lower() != ".gguf":
            raise InvalidModelFile(f"{p.name} is not a .gguf file")
        header = read_header(p)  # magic, metadata, tensor extents: refuses text and truncated files
        if header.architecture is None:
            raise InvalidModelFile(f"{p.name} has no general.architecture: it is not a model llama.cpp can run")
        private_dir(self.data_dir)
        with sole_writer(self._imports_path()):  # two imports at once must not lose one another's row
            return self._add_import(p, header)

    def _add_import(self, p: Path, header) -> LocalModel:
        rows = self._imports()
        for m in self.imported():
            if m.path == str(p):
                return m
        size, parts = _parts_size(p)
        catalog = load_catalog()
        # Never an id a reference already means: a catalog id (with or without a quantization).
        taken = {m.id for m in self.models()} | set(catalog) | {
            f"{e.id}:{q}".lower() for e in catalog.values() for q in e.quants}
        taken |= {t.lower() for t in taken}
        base = re.sub(r"[^A-Za-z0-9_.\-]+", "-", p.stem) or "model"
        mid, n = base, 2
        while mid in taken or mid.lower() in taken:
            mid, n = f"{base}-{n}", n + 1
        name = header.metadata.get("general.name")
        model = LocalModel(mid, name if isinstance(name, str) else p.stem, "imported", str(p), size,
                           quant_of(p.name), None, p.name, None, parts)
        self._write_imports(rows + [{**model.to_dict(), "added": time.time()}])
        return model

    # --- delete -----------------------------------------------------------------------------
    def delete(self, model_id: str) -> dict:
        """Remove a model; returns ``{"id", "freed_bytes", "note"}``. An imported file is only forgotten."""
        m = self.find(model_id)
        if m.source == "imported":
            with sole_writer(self._imports_path()):
                self._write_imports([r for r in self._imports() if r["id"] != m.id])
            return {"id": m.id, "freed_bytes": 0, "note": f"forgotten; the file {m.path} was left in place"}
        if m.source == "embedded":
            size = Path(m.path).stat().st_size
            Path(m.path).unlink()
            return {"id": m.id, "freed_bytes": size, "note": "it is placed again from its package when used"}
        return {"id": m.id, "freed_bytes": self._delete_cached(m), "note": None}

    def _delete_cached(self, m: LocalModel) -> int:
        assert m.repo is not None and m.file is not None  # a model from the cache names both
        folder = repo_dir(m.repo, self.root)
        part = split_part(m.file)
        names = part.names() if part else [m.file]
        blobs: set[Path] = set()
        for snap in (folder / "snapshots").iterdir():
            for n in names:
                link = snap / n
                if link.is_symlink() or link.exists():
                    blobs.add(link.resolve())
                    link.unlink()
        # A blob another snapshot still links to stays; a link that leads out of this repo's
        # blobs folder is only removed, never followed to delete what it points at.
        own = (folder / "blobs").resolve()
        still = {p.resolve() for p in (folder / "snapshots").rglob("*") if p.is_symlink()}
        freed = 0
        for b in blobs - still:
            if b.is_file() and b.parent == own:
                freed += b.stat().st_size
                b.unlink()
        return freed
