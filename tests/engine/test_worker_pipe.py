"""The service's end of a worker pipe under uvloop: frames larger than the pipe arrive whole.

uvloop makes a watched pipe non-blocking, so ``Connection.recv`` of a frame that arrives in
several pieces fails half-way; the worker pipe gathers the pieces instead. A real spawned
process is the other end, writing with plain ``conn.send`` as the workers do.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import sys

import pytest

from runtime.engine.worker_pipe import WorkerPipe

uvloop = pytest.importorskip("uvloop") if sys.platform != "win32" else None

SIZES = [10, 20_000, 3_000_000, 5, 200_000, 64 * 1024, 1]


def _peer(conn) -> None:
    """Echo the size of each message, then send messages of SIZES, then exit."""
    while True:
        msg = conn.recv()
        if msg == "go":
            break
        conn.send(("got", len(msg)))
    for i, n in enumerate(SIZES):
        conn.send((i, b"x" * n))
    conn.close()


def test_large_frames_both_ways_under_uvloop():
    if uvloop is None:
        pytest.skip("uvloop is not used on Windows")

    async def main():
        loop = asyncio.get_running_loop()
        ctx = mp.get_context("spawn")
        conn, child = ctx.Pipe()
        proc = ctx.Process(target=_peer, args=(child,), daemon=True)
        proc.start()
        child.close()
        got, closed = [], asyncio.Event()
        pipe = WorkerPipe(loop, conn, got.append, closed.set)
        pipe.send(b"y" * 2_000_000)  # more than the pipe holds: the loop finishes the write
        pipe.send(b"z" * 100)
        pipe.send("go")
        await asyncio.wait_for(closed.wait(), 60)
        proc.join(10)
        return got, pipe

    got, pipe = uvloop.run(main())
    assert got[:2] == [("got", 2_000_000), ("got", 100)]
    assert [(i, len(b)) for i, b in got[2:]] == list(enumerate(SIZES))
    assert all(b == b"x" * len(b) for _, b in got[2:])
    assert pipe.closed
    with pytest.raises(OSError):
        pipe.send("after the end")


def test_connection_recv_is_what_fails_under_uvloop():
    """The reason for the module: a plain ``recv`` on the watched pipe can fail half-way."""
    if uvloop is None:
        pytest.skip("uvloop is not used on Windows")

    async def main():
        loop = asyncio.get_running_loop()
        a, b = mp.Pipe()
        loop.add_reader(a.fileno(), lambda: None)
        loop.remove_reader(a.fileno())
        import os
        import struct

        os.write(b.fileno(), struct.pack("!i", 100_000) + b"x" * 1000)  # a frame begun, not finished
        with pytest.raises(BlockingIOError):
            a.recv_bytes()

    uvloop.run(main())
