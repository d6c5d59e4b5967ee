"""The service's end of a worker's pipe, driven by the event loop without ever blocking it.

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
import os
import pickle
import struct
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler


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
