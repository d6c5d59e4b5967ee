"""A model file's GGUF header, read once per file version (path, modification time, size)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from runtime.store.gguf_file import GGUFHeader, read_header


@lru_cache(maxsize=64)
def _header(path: str, mtime_ns: int, size: int) -> GGUFHeader:
    return read_header(path)


def header(path: Path) -> GGUFHeader:
    st = path.stat()
    return _header(str(path), st.st_mtime_ns, st.st_size)
