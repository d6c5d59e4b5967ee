"""Files at rest in the data directory: owner-only, written atomically, and a damaged one set aside.

The data directory is created 0700 and every file Hearth writes there (the chat database, the
download list, the imported models, the keys) 0600: they hold what the user asked and typed.
A state file that cannot be read must not stop the app or the service from starting: it is
renamed to ``NAME.corrupt-TIMESTAMP`` beside itself, with a warning, and the caller carries
on with what could be read.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

log = logging.getLogger("hearth")
DIR_MODE, FILE_MODE = 0o700, 0o600


def private_dir(path: Path) -> Path:
    """Create ``path`` and its missing parents owner-only (``mkdir -p`` would make the parents
    with the umask); an existing ``path`` is narrowed to 0700."""
    missing = []
    at = path
    while not at.exists() and at.parent != at:
        missing.append(at)
        at = at.parent
    for folder in reversed(missing):
        folder.mkdir(mode=DIR_MODE, exist_ok=True)
    if not path.is_dir():
        raise NotADirectoryError(f"{path} is not a folder")
    if os.name == "posix" and path.stat().st_mode & 0o077:
        os.chmod(path, DIR_MODE)
    return path


def narrow_tree(path: Path) -> None:
    """Make a folder written by a library (an unpacked archive, a copied model) owner-only:
    every folder in it 0700, every file 0600."""
    if os.name != "posix":
        return
    private_dir(path)
    for root, dirs, files in os.walk(path):
        for name in dirs:
            private_dir(Path(root, name))
        for name in files:
            narrow(Path(root, name))


def private_umask_for(*paths: Path) -> None:
    """Make every file this process creates from now on owner-only when one of ``paths`` lies in
    the data directory: for commands whose files are written by native code or libraries that
    take no mode (llama.cpp's quantizer, the GGUF writer), and by the processes they start."""
    from runtime.config import data_dir

    if os.name != "posix":
        return
    root = data_dir().resolve()
    if any(Path(p).expanduser().resolve().is_relative_to(root) for p in paths):
        os.umask(0o077)


def narrow(path: Path) -> None:
    """Make an existing file owner-only (files from before this rule, or a library's)."""
    if os.name == "posix" and path.exists() and path.stat().st_mode & 0o077:
        os.chmod(path, FILE_MODE)


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically, owner-only. Raises OSError (a full disk):
    the old file is then left as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")  # two threads: two files
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            if os.name == "posix":
                os.fchmod(fd, FILE_MODE)  # the umask cannot widen it
            data = text.encode("utf-8")
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def move_aside(path: Path, reason: str) -> Path:
    """Rename a damaged file out of the way (kept for the user to inspect) and say so."""
    aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}-{n}")
    os.replace(path, aside)
    log.warning("%s could not be read (%s); it was moved to %s and a new one is started", path, reason, aside)
    return aside
