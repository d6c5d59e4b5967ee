"""The curated model catalog (``models/catalog.json``), loaded and validated."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

SCHEMA_VERSION = 1
CATALOG_PATH = Path(__file__).resolve().parents[2] / "models" / "catalog.json"
_REQUIRED = {"id": str, "name": str, "family": str, "license": str, "context_length": int}


class CatalogError(ValueError):
    pass


@dataclass(slots=True)
class CatalogEntry:
    id: str
    name: str
    family: str
    license: str
    context_length: int
    raw: dict = field(default_factory=dict)

    @property
    def embedded(self) -> dict | None:
        return self.raw.get("embedded")


def parse_catalog(data: dict) -> dict[str, CatalogEntry]:
    if data.get("schema_version") != SCHEMA_VERSION:
        raise CatalogError(f"catalog schema_version must be {SCHEMA_VERSION}, got {data.get('schema_version')!r}")
    entries: dict[str, CatalogEntry] = {}
    for i, m in enumerate(data.get("models", [])):
        for key, typ in _REQUIRED.items():
            if not isinstance(m.get(key), typ):
                raise CatalogError(f"catalog model #{i} ({m.get('id', '?')}): '{key}' must be a {typ.__name__}")
        if m["id"] in entries:
            raise CatalogError(f"catalog model id {m['id']!r} appears twice")
        entries[m["id"]] = CatalogEntry(m["id"], m["name"], m["family"], m["license"], m["context_length"], m)
    return entries


@lru_cache(maxsize=1)
def load_catalog(path: Path = CATALOG_PATH) -> dict[str, CatalogEntry]:
    return parse_catalog(json.loads(path.read_text(encoding="utf-8")))
