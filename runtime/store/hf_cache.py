"""The Hugging Face cache: where downloaded model files live, in huggingface_hub's own layout.

``$HF_HUB_CACHE`` (default ``$HF_HOME/hub``, default ``~/.cache/huggingface/hub``)::

    models--{owner}--{repo}/
        blobs/{etag}                 the file's bytes; etag = the LFS sha256 for LFS files
        blobs/{etag}.incomplete      a download in progress (huggingface_hub resumes it too)
        snapshots/{commit}/{file}    relative symlink to ../../blobs/{etag}
        refs/main                    the commit ``main`` pointed to

Files that other tools fetched with ``hf_hub_download`` are found here and not fetched again,
and what Hearth fetches is found by them. The environment is read at call time (not at import,
as ``huggingface_hub.constants`` does), so a changed ``HF_HOME`` takes effect.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path


def repo_folder_name(*, repo_id: str, repo_type: str) -> str:
    """``huggingface_hub.file_download.repo_folder_name``: ``models--owner--name``, the
    cache's folder of a repository (written here: importing huggingface_hub's downloader takes
    about 0.12 s, which resolving a local model does not need)."""
    return "--".join([f"{repo_type}s", *repo_id.split("/")])


DEFAULT_ENDPOINT = "https://huggingface.co"
_HEX = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")  # a git SHA-1 or a SHA-256
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
MAX_FILENAME = 1024


class UntrustedName(ValueError):
    """A name from the hub (or a state file) that must not become a file name."""


def checked_etag(etag: object, filename: object = "a file") -> str:
    """A blob name: the LFS sha256 (64 hex) or a git blob id (40 hex); nothing else names a
    file in the cache (an empty one would be ``blobs/.incomplete``, a separator a path)."""
    if not isinstance(etag, str) or not _HEX.match(etag):
        raise UntrustedName(f"the hub gave {filename!s:.200} the identifier {str(etag)[:80]!r}, which is not "
                            "a 40- or 64-digit lowercase hex digest: refusing to store it")
    return etag


def checked_sha256(value: object, filename: object = "a file") -> str:
    if not isinstance(value, str) or not _SHA256.match(value):
        raise UntrustedName(f"the hub lists the sha256 of {filename!s:.200} as {str(value)[:80]!r}, which is "
                            "not 64 lowercase hex digits")
    return value


def checked_commit(commit: object) -> str:
    if not isinstance(commit, str) or not _HEX.match(commit):
        raise UntrustedName(f"the hub gave the commit {str(commit)[:80]!r}, which is not a 40- or 64-digit "
                            "lowercase hex hash")
    return commit


def checked_filename(name: object) -> str:
    """A file path inside a repo, as it may appear under ``snapshots/{commit}/``: relative,
    ``/``-separated, no empty, ``.`` or ``..`` segment, no backslash or control character."""
    if (not isinstance(name, str) or not name or len(name) > MAX_FILENAME or name.startswith("/")
            or "\\" in name or any(ord(c) < 32 or ord(c) == 127 for c in name)
            or any(part in ("", ".", "..") for part in name.split("/"))):
        raise UntrustedName(f"the hub lists a file named {str(name)[:80]!r}, which is not a safe relative path")
    return name


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")


def cache_dir() -> Path:
    explicit = os.environ.get("HF_HUB_CACHE")
    if explicit:
        return Path(os.path.expandvars(explicit)).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache"), "huggingface")
    return Path(os.path.expandvars(home)).expanduser() / "hub"


@dataclass(slots=True, frozen=True)
class CachedFile:
    """One file of one repo at one commit, as the cache stores it."""

    root: Path
    repo_id: str
    commit: str
    filename: str
    etag: str

    def __post_init__(self) -> None:
        # Every part that becomes a path is checked where the path is made, whatever the source.
        checked_commit(self.commit)
        checked_filename(self.filename)
        checked_etag(self.etag, self.filename)

    @property
    def repo_dir(self) -> Path:
        return self.root / repo_folder_name(repo_id=self.repo_id, repo_type="model")

    @property
    def blob(self) -> Path:
        return self.repo_dir / "blobs" / self.etag

    @property
    def incomplete(self) -> Path:
        return self.repo_dir / "blobs" / f"{self.etag}.incomplete"

    @property
    def snapshot(self) -> Path:
        return self.repo_dir / "snapshots" / self.commit / self.filename

    @property
    def lock(self) -> Path:
        """The lock file huggingface_hub takes for this blob (shared with it)."""
        return self.root / ".locks" / self.repo_dir.name / f"{self.etag}.lock"

    def present(self, size: int | None = None) -> bool:
        """True when the blob is complete here (under any commit): nothing to fetch."""
        return self.blob.is_file() and (size is None or self.blob.stat().st_size == size)

    def partial_bytes(self) -> int:
        try:
            return self.incomplete.stat().st_size
        except FileNotFoundError:
            return 0

    def link(self, revision: str = "main") -> Path:
        """Point the snapshot at the blob and ``refs/{revision}`` at the commit; return the snapshot path."""
        self.snapshot.parent.mkdir(parents=True, exist_ok=True)
        if not self.snapshot.exists():
            from huggingface_hub.file_download import _create_symlink

            _create_symlink(str(self.blob), str(self.snapshot), new_blob=False)
        if revision != self.commit:
            ref = self.repo_dir / "refs" / revision
            ref.parent.mkdir(parents=True, exist_ok=True)
            if not ref.is_file() or ref.read_text() != self.commit:
                ref.write_text(self.commit)
        return self.snapshot


def repo_dir(repo_id: str, root: Path | None = None) -> Path:
    return (root or cache_dir()) / repo_folder_name(repo_id=repo_id, repo_type="model")


def repo_id_of(folder_name: str) -> str | None:
    """``models--owner--repo`` -> ``owner/repo`` (None for datasets, spaces, other folders)."""
    if not folder_name.startswith("models--"):
        return None
    return folder_name[len("models--"):].replace("--", "/")


def find_snapshot(repo_id: str, filename: str, root: Path | None = None) -> Path | None:
    """The newest cached snapshot of ``filename`` in ``repo_id`` (``refs/main`` first), if any."""
    folder = repo_dir(repo_id, root)
    snaps = folder / "snapshots"
    if not snaps.is_dir():
        return None
    ref = folder / "refs" / "main"
    order: list[Path] = []
    if ref.is_file():
        order.append(snaps / ref.read_text().strip())
    order += sorted((p for p in snaps.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    for snap in order:
        candidate = snap / filename
        if candidate.is_file():  # follows the symlink: a dangling link is not a model
            return candidate
    return None


def cached_ggufs(root: Path | None = None) -> list[tuple[str, str, Path]]:
    """Every ``.gguf`` in the cache: (repo id, file name in the repo, snapshot path), one per file name."""
    root = root or cache_dir()
    if not root.is_dir():
        return []
    out: list[tuple[str, str, Path]] = []
    for folder in sorted(root.iterdir()):
        repo_id = repo_id_of(folder.name)
        snaps = folder / "snapshots"
        if repo_id is None or not snaps.is_dir():
            continue
        seen: set[str] = set()
        for snap in sorted(snaps.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True):
            for path in sorted(snap.rglob("*.gguf")):
                name = path.relative_to(snap).as_posix()
                if name not in seen and path.is_file():
                    seen.add(name)
                    out.append((repo_id, name, path))
    return out
