"""The engine worker's entry point as the service names it.

Importing this module loads nothing of llama.cpp, so the service process never maps
``libllama``: the spawned child imports the worker, and with it llama.cpp, by itself.
"""

from __future__ import annotations

from multiprocessing.connection import Connection

from runtime.engine.messages import WorkerSpec


def worker_main(conn: Connection, spec: WorkerSpec) -> None:
    """Run the worker (``runtime.engine.worker.worker_main``) in this, the spawned, process."""
    from runtime.engine.worker import worker_main as run

    run(conn, spec)
