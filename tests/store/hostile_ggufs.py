"""Hostile GGUF files, written byte by byte: each declares more than it holds, or nests, or
lies about its shape. The ``gguf`` package refuses to write most of these, so they are packed
with ``struct`` following the GGUF v3 layout (magic, version, n_tensors, n_kv, key-value
pairs, tensor infos)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

U8, U32, U64, STRING, ARRAY = 0, 4, 10, 8, 9


def s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def kv_u32(key: str, value: int) -> bytes:
    return s(key) + struct.pack("<II", U32, value)


def kv_str(key: str, value: str) -> bytes:
    return s(key) + struct.pack("<I", STRING) + s(value)


def header(n_tensors: int, n_kv: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv)


def llama_keys(block_count: int = 2) -> list[bytes]:
    """The keys the fit planner needs, for a llama model."""
    return [kv_str("general.architecture", "llama"), kv_u32("llama.block_count", block_count),
            kv_u32("llama.embedding_length", 64), kv_u32("llama.attention.head_count", 8),
            kv_u32("llama.context_length", 1024)]


def tensor(name: str, dims: tuple[int, ...], ggml_type: int = 0, offset: int = 0) -> bytes:
    return s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + \
        struct.pack("<IQ", ggml_type, offset)


def model(kvs: list[bytes], tensors: list[bytes] = (), data: bytes = b"\0" * 256) -> bytes:
    body = header(len(tensors), len(kvs)) + b"".join(kvs) + b"".join(tensors)
    return body + b"\0" * (-len(body) % 32) + data


def _nested(depth: int) -> bytes:
    """An array whose element type is array, ``depth`` times over."""
    return s("deep") + struct.pack("<I", ARRAY) + struct.pack("<IQ", ARRAY, 1) * depth + struct.pack("<IQ", U8, 0)


def _sparse_array(path: Path) -> Path:
    """A real 200 MB u8 array in the metadata, followed by a valid rest; written as a sparse
    file (the array is a hole), so it costs no disk."""
    n = 200 << 20
    with path.open("wb") as f:
        f.write(header(1, len(llama_keys()) + 1))
        for kv in llama_keys():
            f.write(kv)
        f.write(s("hostile.array") + struct.pack("<IIQ", ARRAY, U8, n))
        f.seek(n, 1)
        rest = tensor("token_embd.weight", (64, 4))
        f.write(rest)
        f.write(b"\0" * (-f.tell() % 32) + b"\0" * 1024)
    return path


#: name -> bytes of the file, or a function writing it to a path
HOSTILE: dict[str, bytes | Callable[[Path], Path]] = {
    "huge_kv_count": header(0, (1 << 63) - 1) + b"\0" * 376,
    "huge_tensor_count": header((1 << 64) - 1, 0) + b"\0" * 376,
    "overrunning_key": header(0, 1) + struct.pack("<Q", (1 << 62)) + b"\0" * 368,
    "key_just_past_the_end": header(0, 1) + struct.pack("<Q", 377) + b"k" * 376,
    "overrunning_string_value": header(0, 1) + s("general.name") + struct.pack("<IQ", STRING, 1 << 40) + b"x" * 300,
    "declared_200mb_array": model(llama_keys() + [s("hostile") + struct.pack("<IIQ", ARRAY, U8, 200 << 20)]),
    "declared_huge_string_array": model([s("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARRAY, STRING, 1 << 60)]),
    "string_array_overrunning": model([s("tokenizer.ggml.tokens") + struct.pack("<IIQ", ARRAY, STRING, 3)
                                       + s("a") + s("b") + struct.pack("<Q", 1 << 50)]),
    "deep_arrays": header(0, 1) + _nested(100_000),
    "alignment_zero": model(llama_keys() + [kv_u32("general.alignment", 0)], [tensor("t", (8,))]),
    "alignment_not_power_of_two": model(llama_keys() + [kv_u32("general.alignment", 24)], [tensor("t", (8,))]),
    "duplicate_key": model([kv_str("general.architecture", "llama"), kv_str("general.architecture", "x")]),
    "unknown_value_type": header(0, 1) + s("k") + struct.pack("<I", 77) + b"\0" * 300,
    "tensor_with_many_dims": model(llama_keys(), [tensor("t", (1,) * 1000)]),
    "tensor_elements_overflow": model(llama_keys(), [tensor("t", (1 << 40, 1 << 40))]),
    "tensor_name_too_long": model(llama_keys(), [tensor("t" * 5000, (8,))]),
    "huge_block_count": model(llama_keys(block_count=(1 << 32) - 1), [tensor("token_embd.weight", (8, 4))]),
    "block_count_not_a_number": model([kv_str("general.architecture", "llama"), kv_str("llama.block_count", "many"),
                                       *llama_keys()[2:]], [tensor("token_embd.weight", (8, 4))]),
    "real_200mb_array": _sparse_array,
}

#: the ones whose header is well-formed but whose shape numbers are refused (by the planner)
SHAPE_ONLY: tuple[str, ...] = ()  # every hostile file is refused by the header reader itself


def write_all(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, content in HOSTILE.items():
        path = folder / f"{name}.gguf"
        if callable(content):
            content(path)
        else:
            path.write_bytes(content)
        out[name] = path
    return out
