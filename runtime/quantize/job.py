"""The quantizer in a child process: progress from its log, cancellation by ending it.

``llama_model_quantize`` runs in C for seconds to hours and has no abort hook, so the file is
written by a spawned process; cancelling ends that process and removes its ``.part`` file.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import threading
from collections.abc import Callable
from pathlib import Path

from runtime.backends.quantize import QuantizeSpec


class QuantizeCancelled(Exception):
    pass


class QuantizeError(RuntimeError):
    pass


def _child(src: str, dst: str, spec: QuantizeSpec, events) -> None:
    from runtime.backends.quantize import quantize_model

    try:
        quantize_model(src, dst, spec, lambda done, total, name: events.put(("tensor", done, total, name)))
        events.put(("done",))
    except Exception as e:  # noqa: BLE001 - reported to the parent, which raises it typed
        events.put(("error", str(e)))


def run_quantize(src: Path, dst: Path, spec: QuantizeSpec,
                 on_tensor: Callable[[int, int, str], None] | None = None,
                 cancel: threading.Event | None = None) -> Path:
    """Quantize in a child process; raises ``QuantizeCancelled`` when ``cancel`` is set."""
    ctx = mp.get_context("spawn")
    events = ctx.Queue()
    proc = ctx.Process(target=_child, args=(str(src), str(dst), spec, events), daemon=True)
    proc.start()
    try:
        while True:
            if cancel is not None and cancel.is_set():
                raise QuantizeCancelled(f"quantizing {Path(src).name} was cancelled")
            try:
                ev = events.get(timeout=0.1)
            except queue.Empty:
                if not proc.is_alive() and events.empty():
                    raise QuantizeError(f"the quantizer ended with code {proc.exitcode}") from None
                continue
            if ev[0] == "tensor" and on_tensor is not None:
                on_tensor(ev[1], ev[2], ev[3])
            elif ev[0] == "done":
                return Path(dst)
            elif ev[0] == "error":
                raise QuantizeError(ev[1])
    finally:
        if proc.is_alive():
            proc.terminate()
        proc.join()
        Path(str(dst) + ".part").unlink(missing_ok=True)
