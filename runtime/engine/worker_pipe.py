"""The service's end of a worker process and its pipe, driven by the event loop without ever
blocking it (``WorkerProcess``: spawn, load, end, stop; ``WorkerPipe``: the frames).

Messages use ``multiprocessing.Connection``'s framing (a 4-byte big-endian length, or -1 and
an 8-byte length past 2 GiB, then the pickle), so the worker keeps its plain blocking
``conn.send`` / ``conn.recv``. The service's side cannot use them: uvloop makes a pipe
non-blocking once the loop watches it, so ``Connection.recv`` of a message that arrives in
more than one piece (the worker writes a frame over 16 KiB as two writes, and one over the
pipe's 64 KiB capacity in several) fails half-way with ``BlockingIOError``, which looked like
a dead worker; and a blocking ``Connection.send`` of a megabyte prompt would fail half-way and
leave a torn frame. So bytes are gathered here until whole frames are in, and writes that the
pipe does not take now are finished by the loop.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import pickle
import struct
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler

from runtime.engine.messages import Loaded, LoadFailed, Shutdown
from runtime.engine.protocol import EngineError, ModelLoadFailed, WorkerDied


class WorkerPipe:
    """Frames to and from one worker. ``on_message(msg)`` is called for each whole message
    read; ``on_closed()`` once, when the worker's end is gone (EOF or an error)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, conn: Connection,
                 on_message: Callable[[object], None], on_closed: Callable[[], None]) -> None:
        self._loop = loop
        self._conn = conn
        self._fd = conn.fileno()
        self._on_message = on_message
        self._on_closed = on_closed
        self._in = bytearray()  # bytes read, not yet a whole frame
        self._out = bytearray()  # framed messages not yet written
        self._writing = False
        self.closed = False
        loop.add_reader(self._fd, self._read)

    def send(self, msg: object) -> None:
        """Queue one message and write what the pipe takes now; the loop writes the rest.
        Raises ``OSError`` when the worker's end is gone."""
        if self.closed:
            raise BrokenPipeError("the worker's pipe is closed")
        data = ForkingPickler.dumps(msg)
        self._out += struct.pack("!i", len(data)) + data
        if not self._writing:
            self._flush()

    def _flush(self, from_loop: bool = False) -> None:
        try:
            while self._out:
                del self._out[:os.write(self._fd, self._out)]
        except BlockingIOError:
            if not self._writing:
                self._writing = True
                self._loop.add_writer(self._fd, self._flush, True)
            return
        except OSError:
            self._out.clear()  # the worker is gone: the reader sees it and fails the requests
            if not from_loop:
                raise
        self._stop_writing()

    def _stop_writing(self) -> None:
        if self._writing:
            self._writing = False
            self._loop.remove_writer(self._fd)

    def _read(self) -> None:
        """Called by the loop when the pipe is readable (level-triggered: again while data
        remains): read what is there, hand on every whole frame."""
        try:
            data = os.read(self._fd, 1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close()
            return
        buf = self._in
        buf += data
        while len(buf) >= 4:
            (n,) = struct.unpack_from("!i", buf)
            head = 4
            if n == -1:
                if len(buf) < 12:
                    return
                (n,) = struct.unpack_from("!Q", buf, 4)
                head = 12
            if len(buf) < head + n:
                return
            msg = pickle.loads(buf[head:head + n])
            del buf[:head + n]
            self._on_message(msg)

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._loop.remove_reader(self._fd)
        self._stop_writing()
        self._out.clear()
        self._in.clear()
        self._on_closed()


class WorkerProcess:
    """What every worker client shares: spawn the process (``worker_main(conn, spec)``), wait
    for its ``Loaded`` (or ``LoadFailed``), notice its end, stop it. A subclass names its
    worker (``worker_main``, ``kind``), reads its own messages (``_on_message``, handing the
    load messages to ``_on_load_message``) and fails its own requests (``_fail_pending``)."""

    kind = "engine"  #: in the process's name and in the errors ("the engine worker for ...")
    worker_main: Callable = None  # type: ignore[assignment]
    #: a spare process started with the service (``runtime.engine.spare``) may run this worker
    uses_spare = False

    def __init__(self, spec) -> None:
        self.spec = spec
        self.model_id = spec.model_id
        self.loaded: Loaded | None = None
        self.error: str | None = None
        self.alive = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready: asyncio.Future | None = None
        self._exited = asyncio.Event()
        self._stopping = False
        self._pipe: WorkerPipe | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.alive else None

    async def start(self):
        self._loop = asyncio.get_running_loop()
        self._ready = self._loop.create_future()
        if not self._start_spare():
            ctx = mp.get_context("spawn")
            self._conn, child = ctx.Pipe()
            self.process = ctx.Process(target=type(self).worker_main, args=(child, self.spec), daemon=True,
                                       name=f"hearth-{self.kind}-{self.model_id}")
            self.process.start()
            child.close()
        self.alive = True
        self._pipe = WorkerPipe(self._loop, self._conn, self._on_message, self._on_closed)
        try:
            self.loaded = await self._ready
        except EngineError:
            await self.stop()
            raise
        return self.loaded

    def _start_spare(self) -> bool:
        """Hand the spec to the spare worker if one waits (its imports are done); False if none."""
        if not self.uses_spare:
            return False
        from runtime.engine import spare

        taken = spare.take()
        if taken is None:
            return False
        process, conn = taken
        try:
            conn.send(self.spec)  # small, and the spare is blocked in recv: the pipe takes it at once
        except OSError:  # it died meanwhile
            conn.close()
            return False
        self.process, self._conn = process, conn
        return True

    def _send(self, msg: object) -> None:
        """Send one message to the worker; raises ``OSError`` when the pipe is gone."""
        assert self._pipe is not None  # made by start(), before the worker is alive
        self._pipe.send(msg)

    def _on_message(self, msg: object) -> None:
        self._on_load_message(msg)

    def _on_load_message(self, msg: object) -> None:
        assert self._ready is not None  # messages come through the pipe start() made after it
        if isinstance(msg, Loaded):
            self._ready.set_result(msg)
        elif isinstance(msg, LoadFailed):
            self._ready.set_exception(ModelLoadFailed(msg.message, msg.code))

    def _on_closed(self) -> None:
        """The worker's end of the pipe closed: it exited (or is exiting)."""
        self.alive = False
        assert self._loop is not None  # the pipe that closed was made by start() on this loop
        self._loop.run_in_executor(None, self.process.join, 5).add_done_callback(
            lambda _: self._on_exit(self.process.exitcode))

    def _on_exit(self, exitcode: int | None) -> None:
        self.alive = False
        if self.error is None and not self._stopping:
            self.error = f"the {self.kind} worker for {self.model_id} stopped (exit code {exitcode})"
        message = self.error or f"the {self.kind} worker stopped"
        assert self._ready is not None  # the worker was started
        if not self._ready.done():
            self._ready.set_exception(ModelLoadFailed(message))
        self._fail_pending(WorkerDied(message))
        self._exited.set()

    def _fail_pending(self, error: EngineError) -> None:
        raise NotImplementedError

    async def ended(self, timeout: float) -> bool:
        """Wait (at most ``timeout`` seconds) until the service has seen the worker end; whether
        it has. A job can fail before that: a write to a worker that was just killed."""
        try:
            await asyncio.wait_for(self._exited.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop the worker (all its memory goes back to the system)."""
        self._stopping = True
        if self.alive:
            try:
                self._send(Shutdown())
            except OSError:
                pass
            try:
                await asyncio.wait_for(self._exited.wait(), timeout)
            except asyncio.TimeoutError:
                self.process.kill()
                await self._exited.wait()

    close = stop  # the name in runtime.engine.protocol.Engine
