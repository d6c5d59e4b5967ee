"""One Hearth window per user and data directory: a second launch raises the first window and
exits, instead of starting a second app (and a second service) beside it.

The first app listens on a local socket (a named pipe on Windows, a socket file in the runtime
directory elsewhere) named after the data directory; a later launch that can connect to it sends
one line and quits.
"""

from __future__ import annotations

import hashlib
import getpass
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

RAISE = b"raise\n"


def socket_name(data_dir: Path) -> str:
    """The local socket's name for this user and data directory (two data directories, two apps)."""
    key = hashlib.sha256(f"{getpass.getuser()}\0{Path(data_dir).resolve()}".encode()).hexdigest()[:16]
    return f"hearth-{key}"


class SingleInstance(QObject):
    """Held by the first app: ``activated`` when a later launch asks for the window."""

    activated = Signal()

    def __init__(self, server: QLocalServer) -> None:
        super().__init__()
        self.server = server
        server.newConnection.connect(self._connected)

    def _connected(self) -> None:
        while self.server.hasPendingConnections():
            conn = self.server.nextPendingConnection()
            conn.readyRead.connect(lambda c=conn: self._read(c))
            conn.disconnected.connect(conn.deleteLater)

    def _read(self, conn: QLocalSocket) -> None:
        if bytes(conn.readAll().data()).startswith(RAISE.strip()):
            self.activated.emit()
        conn.disconnectFromServer()

    def close(self) -> None:
        self.server.close()


def claim(data_dir: Path, timeout_ms: int = 500) -> SingleInstance | None:
    """The first app gets a ``SingleInstance``; a later one tells the first to show its window
    and gets None (it should exit)."""
    name = socket_name(data_dir)
    probe = QLocalSocket()
    probe.connectToServer(name)
    if probe.waitForConnected(timeout_ms):
        probe.write(RAISE)
        probe.waitForBytesWritten(timeout_ms)
        probe.disconnectFromServer()
        return None
    server = QLocalServer()
    server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)  # this user only
    if not server.listen(name):
        QLocalServer.removeServer(name)  # a socket file left by an app that crashed
        if not server.listen(name):
            return SingleInstance(server)  # cannot listen: run anyway, as a lone instance
    return SingleInstance(server)
