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
    """Create ``path`` (and missing parents) owner-only; an existing one is narrowed to 0700."""
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    if os.name == "posix" and path.stat().st_mode & 0o077:
        os.chmod(path, DIR_MODE)
    return path


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
