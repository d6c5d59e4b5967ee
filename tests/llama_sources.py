"""Files from llama.cpp's source tree, as vendored by the installed llama-cpp-python.

llama.cpp ships vocabulary-only GGUFs (``models/ggml-vocab-*.gguf``: the real tokenizers of
Llama 3, Qwen 2, DeepSeek, Phi-3, Command R, Gemma 4 ...) for its tokenizer tests; the wheel
leaves them out, the source distribution has them. The sdist of the installed version is
downloaded once with pip into a cache directory (``HEARTH_TEST_CACHE``, default
``~/.cache/hearth-tests``), and each vocabulary is extracted from it the first time a test asks
for it. A file lock makes concurrent first use (several pytest processes) download once.

A download that fails raises :class:`SourcesUnavailable` with pip's words: the tests that need
these files fail, they are never skipped.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from filelock import FileLock

CACHE = Path(os.environ.get("HEARTH_TEST_CACHE", Path.home() / ".cache" / "hearth-tests"))
#: seconds pip may take to fetch the sdist (about 75 MB)
DOWNLOAD_TIMEOUT = 900


class SourcesUnavailable(RuntimeError):
    """llama-cpp-python's source distribution could not be had (no network, no such version)."""


def _version() -> str:
    return importlib.metadata.version("llama-cpp-python")


def source_dir() -> Path:
    """The cache folder of the installed version's sources (its sdist and what was extracted)."""
    return CACHE / f"llama-cpp-python-{_version()}"


def _sdist(where: Path) -> Path:
    """The sdist in ``where``, downloaded there first if missing (the caller holds the lock)."""
    found = sorted(where.glob("llama_cpp_python-*.tar.gz"))
    if found:
        return found[0]
    version = _version()
    with tempfile.TemporaryDirectory(dir=where) as tmp:  # an interrupted download leaves no half file
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                "--disable-pip-version-check", f"llama-cpp-python=={version}", "-d", tmp]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT)
        except subprocess.TimeoutExpired as e:
            raise SourcesUnavailable(f"pip took over {DOWNLOAD_TIMEOUT} s to download llama-cpp-python {version}'s "
                                     "source distribution (PyPI must be reachable)") from e
        found = sorted(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        if done.returncode != 0 or not found:
            raise SourcesUnavailable(
                f"could not download llama-cpp-python {version}'s source distribution, which has llama.cpp's "
                f"vocabulary files (PyPI must be reachable; or put the sdist in {where}):\n"
                f"{(done.stderr or done.stdout).strip()[-1500:]}")
        return found[0].replace(where / found[0].name)


def llama_vocabs(*names: str) -> dict[str, Path]:
    """The paths of ``ggml-vocab-NAME.gguf`` for each name (``qwen2``, ``llama-bpe``, ...),
    extracted from the sdist on first use, all in one pass over the archive."""
    where = source_dir()
    where.mkdir(parents=True, exist_ok=True)
    paths = {n: where / f"ggml-vocab-{n}.gguf" for n in names}
    missing = {p.name: p for p in paths.values() if not p.exists()}
    if not missing:
        return paths
    with FileLock(str(where / ".lock")):
        missing = {name: p for name, p in missing.items() if not p.exists()}  # another process made them
        if missing:
            _extract(_sdist(where), missing)
    return paths


def llama_vocab(name: str) -> Path:
    """The path of ``ggml-vocab-NAME.gguf`` (see :func:`llama_vocabs`)."""
    return llama_vocabs(name)[name]


def _extract(sdist: Path, wanted: dict[str, Path]) -> None:
    """Copy the archive's ``vendor/llama.cpp/models/<name>`` members to ``wanted[name]`` (each
    written under a temporary name and renamed: a reader never sees half a file)."""
    with tarfile.open(sdist, "r:gz") as tar:
        for member in tar:
            folder, _, name = member.name.rpartition("/")
            if name not in wanted or not folder.endswith("/vendor/llama.cpp/models") or not member.isfile():
                continue
            src = tar.extractfile(member)
            assert src is not None
            target = wanted.pop(name)
            part = target.with_suffix(".part")
            with src, open(part, "wb") as out:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
            part.replace(target)
            if not wanted:
                return
    if wanted:
        raise SourcesUnavailable(f"{sdist.name} has no {', '.join(sorted(wanted))} under vendor/llama.cpp/models/")
