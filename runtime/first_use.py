"""Files made on first use (the embedded models, the API key, ...): one maker at a time.

Two requests that first need the same file, or a request that arrives while the startup
preload writes it, must not write the same temporary file and rename it under each other.
So the maker holds ``sole_writer(target)``: a threading lock for the threads of this process and a
file lock beside the target for other processes sharing the data directory (the app's service
and a ``hearth`` command); it checks again whether the file exists once it holds the lock; and it
writes under a unique temporary name in the target's folder (``temporary_beside``), renamed over
the target in one step, so a crash never leaves a half file under the real name.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

#: how long a maker waits for another one (a model copy takes seconds; a stuck one is reported)
WAIT_S = 600.0

_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


class StillBeingMade(TimeoutError):
    """Another thread or process held the lock on a file for longer than ``WAIT_S``."""


def lock_path(target: Path) -> Path:
    """The lock file for making ``target``: hidden, beside it."""
    return target.with_name(f".{target.name}.lock")


def _thread_lock(target: Path) -> threading.Lock:
    key = os.path.abspath(target)
    with _locks_guard:
        return _locks.setdefault(key, threading.Lock())


@contextmanager
def sole_writer(target: Path, wait_s: float = WAIT_S) -> Iterator[None]:
    """Hold the right to make or rewrite ``target`` (its folder is made if missing); the caller checks
    again, holding it, whether the work is still to do. Raises ``StillBeingMade``."""
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = _thread_lock(target)
    if not lock.acquire(timeout=wait_s):
        raise StillBeingMade(f"{target.name} is still being written by another request; try again")
    try:
        try:
            with FileLock(str(lock_path(target)), timeout=wait_s, mode=0o600):
                yield
        except Timeout:
            raise StillBeingMade(f"{target.name} is still being written by another Hearth process; "
                                 "try again") from None
    finally:
        lock.release()


def temporary_beside(target: Path, directory: bool = False) -> Path:
    """A new, uniquely named file (or folder) in ``target``'s folder, owner-only, for writing
    ``target``'s content before it is renamed over ``target``."""
    prefix, suffix = f".{target.name}.", ".partial"
    if directory:
        return Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=target.parent))
    fd, name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=target.parent)
    os.close(fd)
    return Path(name)
