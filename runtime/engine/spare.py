"""A spare engine worker: it does the worker's imports (llama.cpp, numpy: most of a second on a
small machine), probes the hardware when asked (``probe``: the same llama.cpp import answers
the probe and then loads the model), then waits for the spec of the model it is to load.

``hearth serve`` starts one (``start``) before it imports the API where the start-ups overlap
(2 CPUs and more), and the first model load starts one to probe with where none waits; the
first engine that starts takes it (``take``), so the load begins with those imports done.
Only one is ever kept, and only until that load: ``discard`` ends it when the load did not use
it (an embedding model, a remote one, a model that does not fit), so an idle spare never holds
memory. Importing this module loads nothing of llama.cpp.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.hardware.info import HardwareInfo

_lock = threading.Lock()
#: held through a probe's question and answer: the spare is not handed out meanwhile
_exchange = threading.Lock()
_spare: tuple[mp.process.BaseProcess, Connection] | None = None


@dataclass(frozen=True, slots=True)
class ProbeAsked:
    """The message that asks the spare for ``runtime.hardware.probe.probe(*args)``."""

    args: tuple


def spare_main(conn: Connection) -> None:
    """In the spawned process: import the worker, answer probes, then run the worker on the
    spec that comes (or end when the service ends the spare)."""
    from runtime.engine.worker import worker_main

    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        if not isinstance(msg, ProbeAsked):
            break
        from runtime.hardware.probe import probe_child_answer

        probe_child_answer(conn, msg.args)
    worker_main(conn, msg)


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


def take(wait: bool = False) -> tuple[mp.process.BaseProcess, Connection] | None:
    """The waiting spare (its process and the service's end of its pipe), or None; it is no
    longer the spare. One that is probing is None unless ``wait`` (blocking: off the event loop)."""
    global _spare
    if not _exchange.acquire(blocking=wait):  # it is probing: the caller starts its own worker
        return None
    try:
        with _lock:
            spare, _spare = _spare, None
    finally:
        _exchange.release()
    if spare is not None and not spare[0].is_alive():
        spare[1].close()
        return None
    return spare


def discard() -> None:
    """End the spare if it is still waiting (it exits on the closed pipe), once a probe it is
    answering is done. Blocking."""
    spare = take(wait=True)
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


def probe(measure_bandwidth: bool = True, timeout: float = 60.0) -> HardwareInfo:
    """``runtime.hardware.probe.probe()`` run in the spare, which is started now where none waits
    and then waits for the load that follows. Raises ``RuntimeError`` when the spare does not
    answer in ``timeout`` seconds (it is then ended) or dies."""
    start()
    with _exchange:
        with _lock:
            spare = _spare
        if spare is None:
            raise RuntimeError("no spare engine worker to probe with")
        process, conn = spare
        try:
            conn.send(ProbeAsked((measure_bandwidth,)))
            if not conn.poll(timeout):
                raise RuntimeError(f"the hardware probe took more than {timeout:.0f} s: stopped")
            status, payload = conn.recv()
        except (EOFError, OSError, RuntimeError) as e:
            _end(process, conn)
            if isinstance(e, RuntimeError):
                raise
            raise RuntimeError("the spare engine worker died while probing the hardware") from None
    if status != "ok":
        raise RuntimeError(f"the hardware probe failed: {payload}")
    return payload


def _end(process: mp.process.BaseProcess, conn: Connection) -> None:
    global _spare
    with _lock:
        if _spare is not None and _spare[0] is process:
            _spare = None
    conn.close()
    process.kill()
    process.join(5)


def waiting() -> bool:
    """Whether a spare is waiting for a spec."""
    with _lock:
        return _spare is not None and _spare[0].is_alive()
