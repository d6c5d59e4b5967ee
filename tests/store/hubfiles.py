"""Tiny GGUF files for the store's tests, published on the loopback hub."""

from __future__ import annotations

from pathlib import Path

from tests.hardware.ggufs import write_model

REPO = "hearth-test/Tiny-GGUF"
FILE = "Tiny-Q4_K_M.gguf"


def tiny_model(path: Path) -> Path:
    """A valid llama GGUF of about 4.5 MB: several 1 MiB write buffers, quick to hash."""
    return write_model(path, n_layer=2, n_embd=256, n_head=8, n_head_kv=2, n_ff=512, n_vocab=4096)


def publish(hub, tmp_path: Path, repo: str = REPO, name: str = FILE) -> bytes:
    data = tiny_model(tmp_path / "src.gguf").read_bytes()
    hub.add_repo(repo, {name: data, "README.md": b"# tiny\n"})
    return data
