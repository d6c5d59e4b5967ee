"""Read a GGUF file's header without loading its weights, and refuse broken or hostile files.

A truncated download, a file that is not GGUF, or a file crafted to make its reader allocate
without bound must be refused with a clear message before llama.cpp sees it. The reader walks
the header (metadata and tensor infos) with ``struct`` on a memory map, which takes
milliseconds even for a 262k-token vocabulary, and checks that every tensor's data lies inside
the file. Nothing it keeps is larger than the caps below, so a header that declares more than
the file holds is refused by arithmetic, not by trying to read it.

Caps (llama.cpp's ``gguf.cpp`` checks each of these too; where it has a number, ours is equal
or smaller):

- every length and count must fit in the bytes left in the file (llama.cpp: the same check);
- key-value pairs and tensors: at most ``MAX_KV`` (65,536) and ``MAX_TENSORS`` (1 Mi) (llama.cpp: SIZE_MAX /
  sizeof(entry));
- keys: 1 to ``MAX_KEY_BYTES`` (64 KiB) bytes, no duplicates (llama.cpp: not empty, no duplicates);
- string values: at most ``MAX_STRING_BYTES`` (64 MiB; llama.cpp: GGUF_MAX_STRING_LENGTH, 1 GiB);
- arrays: at most ``MAX_ARRAY_ELEMENTS`` (16 Mi) elements, string arrays at most
  ``MAX_STRING_ARRAY_ELEMENTS`` (4 Mi; the largest vocabularies have about 260k tokens)
  (llama.cpp: GGUF_MAX_ARRAY_ELEMENTS, 1 Gi); arrays of arrays
  are refused (llama.cpp refuses them); arrays over ``KEEP_ARRAY_ELEMENTS`` are checked and
  skipped, not kept (``SkippedArray`` says their type and length);
- metadata kept in memory: at most ``MAX_KEPT_BYTES`` (128 MiB) in all;
- ``general.alignment``: an unsigned 32-bit power of two (llama.cpp: the same);
- tensors: names 1 to 63 bytes and unique, at most 4 dimensions, every dimension and the
  element count below 2**63, a known ggml type, rows a whole number of blocks, offsets
  aligned (llama.cpp: GGML_MAX_NAME 64, GGML_MAX_DIMS 4, the same overflow and block checks).

The architecture numbers that size a model are bounded too (``SHAPE_BOUNDS``: ``block_count``
at most 512, llama.cpp's LLAMA_MAX_LAYERS; ``context_length`` at most 2**30; heads, lengths and
the vocabulary likewise; ``expert_count`` at most 1,024, llama.cpp's LLAMA_MAX_EXPERTS), so a
400-byte file cannot make the fit planner build a tuple of 2**32 layers;
``runtime.hardware.shape`` applies the same bounds to values it derives.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from runtime.store.ggml_types import QUANT_SIZES

GGUF_MAGIC = b"GGUF"
# GGUF metadata value types -> struct format of scalars
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9

MAX_KV = 1 << 16
MAX_TENSORS = 1 << 20
MAX_KEY_BYTES = 1 << 16
MAX_STRING_BYTES = 64 << 20
MAX_ARRAY_ELEMENTS = 1 << 24
MAX_STRING_ARRAY_ELEMENTS = 1 << 22
KEEP_ARRAY_ELEMENTS = 1 << 16
MAX_KEPT_BYTES = 128 << 20
MAX_TENSOR_NAME_BYTES = 63
MAX_DIMS = 4
_INT64_MAX = (1 << 63) - 1
_U64 = struct.Struct("<Q")


#: ``{arch}.KEY`` -> the largest value accepted (every real model is far inside these)
SHAPE_BOUNDS = {
    "block_count": 512, "embedding_length": 1 << 20, "head_count": 1 << 14, "head_count_kv": 1 << 14,
    "context_length": 1 << 30, "key_length": 1 << 16, "value_length": 1 << 16,
    "sliding_window": 1 << 30, "vocab_size": 1 << 26, "feed_forward_length": 1 << 24,
    "expert_count": 1024, "expert_used_count": 1024, "expert_shared_count": 1024,
    "expert_feed_forward_length": 1 << 24,
}
_PER_LAYER_KEYS = ("head_count", "head_count_kv", "feed_forward_length", "expert_used_count",
                   "expert_feed_forward_length")

#: the routed experts of a mixture-of-experts layer (``blk.N.ffn_up_exps.weight`` and its kin):
#: llama.cpp's ``LLM_FFN_EXPS_REGEX`` (common.h), which ``--cpu-moe`` / ``--n-cpu-moe`` match.
#: Shared experts (``ffn_*_shexp``) and the router (``ffn_gate_inp``) are not among them: every
#: token reads those.
EXPERT_TENSORS = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"


class InvalidModelFile(ValueError):
    """The file is not a complete, readable GGUF model."""


@dataclass(slots=True, frozen=True)
class SkippedArray:
    """A metadata array too long to keep (a vocabulary, or a hostile file's): checked, not read."""

    element_type: int
    count: int


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
    def __init__(self, buf: mmap.mmap, size: int, name: str) -> None:
        self.buf, self.size, self.pos, self.name = buf, size, 0, name
        self.kept = 0

    def damaged(self, what: str) -> InvalidModelFile:
        return InvalidModelFile(f"{self.name} is damaged or not a usable model: {what}")

    def need(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            raise InvalidModelFile(
                f"{self.name} ends inside its header ({what} needs {n:,} bytes, {self.size - self.pos:,} are "
                "left): it is truncated or damaged")

    def take(self, fmt: str):
        n = struct.calcsize(fmt)
        self.need(n, "a value")
        value = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += n
        return value[0] if len(value) == 1 else value

    def keep(self, n: int) -> None:
        self.kept += n
        if self.kept > MAX_KEPT_BYTES:
            raise self.damaged(f"its metadata is over {MAX_KEPT_BYTES >> 20} MiB")

    def string(self, limit: int = MAX_STRING_BYTES, keep: bool = True) -> str | None:
        n = self.take("Q")
        if n > limit:
            raise self.damaged(f"a string of {n:,} bytes (the limit is {limit:,})")
        self.need(n, "a string")
        start, self.pos = self.pos, self.pos + n
        if not keep:
            return None
        self.keep(n)
        return bytes(self.buf[start:self.pos]).decode("utf-8", errors="replace")

    def skip_strings(self, count: int) -> None:
        """Walk ``count`` strings without decoding them (a vocabulary: a tight loop, no objects)."""
        unpack, buf, pos, size = _U64.unpack_from, self.buf, self.pos, self.size
        for _ in range(count):
            if pos + 8 > size:
                break
            n = unpack(buf, pos)[0]
            if n > MAX_STRING_BYTES:
                raise self.damaged(f"a string of {n:,} bytes (the limit is {MAX_STRING_BYTES:,})")
            pos += 8 + n
            if pos > size:
                break
        else:
            self.pos = pos
            return
        raise InvalidModelFile(f"{self.name} ends inside its header (in an array of strings): it is truncated "
                               "or damaged")

    def value(self, vtype: int, keep: bool = True):
        if vtype in _SCALARS:
            return self.take(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string(keep=keep)
        if vtype == _ARRAY:
            return self.array(keep)
        raise self.damaged(f"unknown metadata value type {vtype}")

    def array(self, keep: bool):
        etype, count = self.take("I"), self.take("Q")
        if etype == _ARRAY:
            raise self.damaged("an array of arrays (llama.cpp refuses them too)")
        if etype not in _SCALARS and etype != _STRING:
            raise self.damaged(f"an array of unknown type {etype}")
        limit = MAX_STRING_ARRAY_ELEMENTS if etype == _STRING else MAX_ARRAY_ELEMENTS
        if count > limit:
            raise self.damaged(f"an array of {count:,} elements (the limit is {limit:,})")
        width = 8 if etype == _STRING else struct.calcsize(_SCALARS[etype])
        self.need(count * width, f"an array of {count:,} elements")  # refused before any element is read
        keep = keep and count <= KEEP_ARRAY_ELEMENTS
        if etype == _STRING and not keep:
            self.skip_strings(count)
        elif etype == _STRING:
            items = [self.string() for _ in range(count)]
        elif keep:
            fmt = _SCALARS[etype]
            items = list(struct.unpack_from(f"<{count}{fmt}", self.buf, self.pos))
            self.pos += count * width
        else:
            self.pos += count * width  # skipped, not read
        if not keep:
            return SkippedArray(etype, count)
        self.keep(count * 8)
        return items


_BIG_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
               "tokenizer.ggml.merges")


def read_header(path: str | Path) -> GGUFHeader:
    """Parse and validate a GGUF file's header; raise ``InvalidModelFile`` if it is broken.

    Blocking (it reads the file): call it from a thread in async code."""
    path = Path(path)
    if not path.is_file():
        raise InvalidModelFile(f"{path} does not exist")
    size = path.stat().st_size
    if size < 24:
        raise InvalidModelFile(f"{path.name} is {size} bytes: not a GGUF model")
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != GGUF_MAGIC:
            raise InvalidModelFile(f"{path.name} is not a GGUF file (its first bytes are not 'GGUF')")
        cur = _Cursor(buf, size, path.name)
        cur.pos = 4
        version, n_tensors, n_kv = cur.take("I"), cur.take("Q"), cur.take("Q")
        if version not in (2, 3):
            raise InvalidModelFile(f"{path.name} is GGUF version {version}; versions 2 and 3 are supported")
        if n_kv > MAX_KV or n_tensors > MAX_TENSORS:
            raise cur.damaged(f"it declares {n_kv:,} metadata keys and {n_tensors:,} tensors "
                              f"(the limits are {MAX_KV:,} and {MAX_TENSORS:,})")
        cur.need(n_kv * 13 + n_tensors * 24, f"{n_kv:,} keys and {n_tensors:,} tensors")  # their smallest size
        header = GGUFHeader(str(path), version, file_size=size)
        _read_metadata(cur, header, n_kv)
        align = _alignment(cur, header)
        _read_tensors(cur, header, n_tensors, align)
        _check_shape_numbers(cur, header)
    header.data_offset = (cur.pos + align - 1) // align * align
    end = max((t.offset + t.n_bytes for t in header.tensors), default=0) + header.data_offset
    if end > size:
        raise InvalidModelFile(
            f"{path.name} is truncated: its tensors need {end:,} bytes but the file has {size:,}; "
            "download it again"
        )
    return header


def read_token_texts(path: str | Path, ids: set[int]) -> dict[int, str]:
    """The text of the vocabulary's tokens ``ids`` (``tokenizer.ggml.tokens``, which
    ``read_header`` walks without keeping): the ids that are in it, no more. Blocking; the file
    is refused as ``read_header`` refuses it where its header is broken."""
    path = Path(path)
    found: dict[int, str] = {}
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        cur = _Cursor(buf, len(buf), path.name)
        cur.pos = 8  # after the magic and the version
        cur.take("Q")  # the tensor count
        for _ in range(min(cur.take("Q"), MAX_KV)):
            key, vtype = cur.string(MAX_KEY_BYTES), cur.take("I")
            if key != "tokenizer.ggml.tokens" or vtype != _ARRAY:
                cur.value(vtype, keep=False)
                continue
            etype, count = cur.take("I"), cur.take("Q")
            if etype != _STRING:
                break
            for i in range(min(count, MAX_STRING_ARRAY_ELEMENTS, max(ids, default=-1) + 1)):
                text = cur.string(keep=i in ids)
                if text is not None:
                    found[i] = text
            break
    return found


def _read_metadata(cur: _Cursor, header: GGUFHeader, n_kv: int) -> None:
    for _ in range(n_kv):
        key = cur.string(MAX_KEY_BYTES)
        if not key:
            raise cur.damaged("an empty metadata key")
        if key in header.metadata:
            raise cur.damaged(f"the metadata key {key[:80]!r} appears twice")
        # Vocabulary arrays are large and not needed here; token strings are walked.
        header.metadata[key] = cur.value(cur.take("I"), keep=key not in _BIG_ARRAYS)


def _alignment(cur: _Cursor, header: GGUFHeader) -> int:
    align = header.metadata.get("general.alignment", 32)
    if isinstance(align, bool) or not isinstance(align, int) or align <= 0 or align & (align - 1) or align >= 1 << 32:
        raise cur.damaged(f"general.alignment is {align!r}; it must be a power of two")
    return align


def _check_shape_numbers(cur: _Cursor, header: GGUFHeader) -> None:
    """The architecture numbers present must be integers inside ``SHAPE_BOUNDS`` (per-layer
    ones may be arrays of them); absent ones are the planner's concern."""
    arch = header.architecture
    if arch is None:
        return
    for key, value in header.metadata.items():
        prefix, _, name = key.rpartition(".")
        if not (prefix == arch or prefix == f"{arch}.attention") or name not in SHAPE_BOUNDS:
            continue
        values = value if isinstance(value, list) and name in _PER_LAYER_KEYS else [value]
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int):
                raise cur.damaged(f"'{key}' is {str(v)[:40]!r}, not an integer")
            if not 0 <= v <= SHAPE_BOUNDS[name]:
                raise cur.damaged(f"'{key}' = {v:,}; Hearth accepts 0 to {SHAPE_BOUNDS[name]:,}")


def _read_tensors(cur: _Cursor, header: GGUFHeader, n_tensors: int, align: int) -> None:
    names: set[str] = set()
    for _ in range(n_tensors):
        name = cur.string(MAX_TENSOR_NAME_BYTES)
        if not name or name in names:
            raise cur.damaged(f"a tensor name is {'empty' if not name else 'repeated: ' + repr(name)}")
        names.add(name)
        n_dims = cur.take("I")
        if n_dims > MAX_DIMS:
            raise cur.damaged(f"tensor {name!r} has {n_dims:,} dimensions (at most {MAX_DIMS})")
        dims = tuple(cur.take("Q") for _ in range(n_dims))
        ggml_type, offset = cur.take("I"), cur.take("Q")
        n_bytes = _tensor_bytes(cur, name, dims, ggml_type)
        if offset % align or offset > _INT64_MAX:
            raise cur.damaged(f"tensor {name!r} starts at offset {offset:,}, not a multiple of {align}")
        header.tensors.append(TensorInfo(name, dims, ggml_type, offset, n_bytes))


def _tensor_bytes(cur: _Cursor, name: str, dims: tuple[int, ...], ggml_type: int) -> int:
    try:
        block, type_size = QUANT_SIZES[ggml_type]
    except KeyError:
        raise InvalidModelFile(f"{cur.name}: tensor {name!r} has the unknown type {ggml_type}: the file is "
                               "damaged or too new for this version of Hearth") from None
    n = 1
    for d in dims:
        n *= d
        if n > _INT64_MAX:
            raise cur.damaged(f"tensor {name!r} of shape {dims} has more than 2**63 elements")
    if dims and dims[0] % block:
        raise cur.damaged(f"tensor {name!r}: a row of {dims[0]} elements is not a whole number of "
                          f"{block}-element blocks")
    return n // block * type_size


@lru_cache(maxsize=64)
def _header_of_version(path: str, mtime_ns: int, size: int, inode: int) -> GGUFHeader:
    return read_header(path)


def cached_header(path: str | Path) -> GGUFHeader:
    """``read_header``, once per version of the file (path, modification time, size, inode): the
    service resolves, checks and plans a model from one read of its header (a 262k-token
    vocabulary takes 40 ms to walk). Shared: treat it as read-only."""
    st = Path(path).stat()
    return _header_of_version(str(path), st.st_mtime_ns, st.st_size, st.st_ino)
