"""A model file's GGUF header, read once per file version (path, modification time, size)."""

from __future__ import annotations

from pathlib import Path

from runtime.store.gguf_file import GGUFHeader, cached_header


def header(path: Path) -> GGUFHeader:
    return cached_header(path)
