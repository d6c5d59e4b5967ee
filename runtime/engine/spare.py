"""A spare engine worker: started with the service, it does the worker's imports (llama.cpp,
numpy: most of a second on a small machine) while the service does its own and probes the
hardware, then waits for the spec of the model it is to load.

``hearth serve`` starts one (``start``) before it imports the API and hands it to the first
engine that starts (``take``), so the default model's load begins with those imports done.
Only one is ever kept, and only until the default model's load: ``discard`` ends it when that
load did not use it (an embedding model, a remote one), so an idle spare never holds memory.
Importing this module loads nothing of llama.cpp.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
from multiprocessing.connection import Connection

_lock = threading.Lock()
_spare: tuple[mp.process.BaseProcess, Connection] | None = None


def spare_main(conn: Connection) -> None:
    """In the spawned process: import the worker, then run it on the spec that comes (or end
    when the service ends the spare)."""
    from runtime.engine.worker import worker_main

    try:
        spec = conn.recv()
    except (EOFError, OSError):
        return
    if spec is None:
        return
    worker_main(conn, spec)


def start() -> None:
    """Spawn the spare (nothing if one is waiting)."""
    global _spare
    with _lock:
        if _spare is not None and _spare[0].is_alive():
            return
        ctx = mp.get_context("spawn")
        conn, child = ctx.Pipe()
        process = ctx.Process(target=spare_main, args=(child,), daemon=True, name="hearth-engine-spare")
        process.start()
        child.close()
        _spare = (process, conn)


def take() -> tuple[mp.process.BaseProcess, Connection] | None:
    """The waiting spare (its process and the service's end of its pipe), or None; it is no
    longer the spare."""
    global _spare
    with _lock:
        spare, _spare = _spare, None
    if spare is not None and not spare[0].is_alive():
        spare[1].close()
        return None
    return spare


def discard() -> None:
    """End the spare if it is still waiting (it exits on the closed pipe)."""
    spare = take()
    if spare is None:
        return
    process, conn = spare
    try:
        conn.send(None)
    except OSError:
        pass
    conn.close()
    process.join(5)
    if process.is_alive():
        process.kill()
        process.join(5)


def waiting() -> bool:
    """Whether a spare is waiting for a spec."""
    with _lock:
        return _spare is not None and _spare[0].is_alive()
