"""Read a GGUF file's header without loading its weights, and refuse broken files.

A truncated download or a file that is not GGUF must be refused with a clear message
before llama.cpp sees it. The reader walks the header (metadata and tensor infos) with
``struct`` on a memory map, which takes milliseconds even for a 262k-token vocabulary, and
checks that every tensor's data lies inside the file.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

GGUF_MAGIC = b"GGUF"
# GGUF metadata value types -> struct format of scalars
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


class InvalidModelFile(ValueError):
    """The file is not a complete, readable GGUF model."""


@dataclass(slots=True)
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int
    n_bytes: int


@dataclass(slots=True)
class GGUFHeader:
    path: str
    version: int
    metadata: dict[str, object] = field(default_factory=dict)
    tensors: list[TensorInfo] = field(default_factory=list)
    data_offset: int = 0
    file_size: int = 0

    @property
    def architecture(self) -> str | None:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None

    def arch_value(self, key: str) -> object | None:
        """A per-architecture value such as ``context_length`` (``{arch}.{key}``)."""
        return self.metadata.get(f"{self.architecture}.{key}")


class _Cursor:
    def __init__(self, buf: mmap.mmap, size: int) -> None:
        self.buf, self.size, self.pos = buf, size, 0

    def take(self, fmt: str):
        n = struct.calcsize(fmt)
        if self.pos + n > self.size:
            raise InvalidModelFile("the file ends inside its header: it is truncated")
        value = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += n
        return value[0] if len(value) == 1 else value

    def string(self) -> str:
        n = self.take("Q")
        if self.pos + n > self.size:
            raise InvalidModelFile("the file ends inside its header: it is truncated")
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, vtype: int, keep: bool = True):
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.take("I"), self.take("Q")
            if etype in _SCALARS and not keep:
                self.pos += struct.calcsize(_SCALARS[etype]) * count  # skipped, not read
                return None
            if etype == _STRING and not keep:
                for _ in range(count):
                    self.pos += 8 + struct.unpack_from("<Q", self.buf, self.pos)[0]
                if self.pos > self.size:
                    raise InvalidModelFile("the file ends inside its header: it is truncated")
                return None
            items = [self.value(etype, keep) for _ in range(count)]
            return items if keep else None
        raise InvalidModelFile(f"unknown GGUF value type {vtype}: the file is damaged")


_BIG_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
               "tokenizer.ggml.merges")


def read_header(path: str | Path) -> GGUFHeader:
    """Parse and validate a GGUF file's header; raise ``InvalidModelFile`` if it is broken."""
    path = Path(path)
    if not path.is_file():
        raise InvalidModelFile(f"{path} does not exist")
    size = path.stat().st_size
    if size < 24:
        raise InvalidModelFile(f"{path.name} is {size} bytes: not a GGUF model")
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != GGUF_MAGIC:
            raise InvalidModelFile(f"{path.name} is not a GGUF file (its first bytes are not 'GGUF')")
        cur = _Cursor(buf, size)
        cur.pos = 4
        version, n_tensors, n_kv = cur.take("I"), cur.take("Q"), cur.take("Q")
        if version not in (2, 3):
            raise InvalidModelFile(f"{path.name} is GGUF version {version}; versions 2 and 3 are supported")
        header = GGUFHeader(str(path), version, file_size=size)
        for _ in range(n_kv):
            key = cur.string()
            # Vocabulary arrays are large and not needed here; token strings are walked.
            header.metadata[key] = cur.value(cur.take("I"), keep=key not in _BIG_ARRAYS)
        for _ in range(n_tensors):
            name = cur.string()
            dims = tuple(cur.take("Q") for _ in range(cur.take("I")))
            ggml_type, offset = cur.take("I"), cur.take("Q")
            header.tensors.append(TensorInfo(name, dims, ggml_type, offset, _tensor_bytes(dims, ggml_type)))
    align = header.metadata.get("general.alignment", 32)
    header.data_offset = (cur.pos + align - 1) // align * align
    end = max((t.offset + t.n_bytes for t in header.tensors), default=0) + header.data_offset
    if end > size:
        raise InvalidModelFile(
            f"{path.name} is truncated: its tensors need {end:,} bytes but the file has {size:,}; "
            "download it again"
        )
    return header


def _tensor_bytes(dims: tuple[int, ...], ggml_type: int) -> int:
    try:
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        raise InvalidModelFile(f"unknown tensor type {ggml_type}: the file is damaged or too new") from None
    n = 1
    for d in dims:
        n *= d
    return n // block * type_size
