"""The embedding worker's entry point as the service names it: importing this module loads
neither ONNX Runtime nor llama.cpp (the spawned child imports them by itself)."""

from __future__ import annotations

from multiprocessing.connection import Connection

from runtime.engine.embed_messages import EmbedSpec


def embed_worker_main(conn: Connection, spec: EmbedSpec) -> None:
    from runtime.engine.embed_worker import worker_main

    worker_main(conn, spec)
