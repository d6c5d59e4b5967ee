"""Clients the service tells apart on loopback: each one a machine account.

On loopback the service counts requests per machine account that owns the connecting socket
(``runtime.server.client_identity``), never per source address, which any process picks. A test
that plays several clients makes each one's sockets under a uid of its own: a helper process per
account (forked, then given the account's uid, which needs root) connects and hands the connected sockets back
over a Unix socket (SCM_RIGHTS). The kernel's socket table keeps the uid that made a socket, so
the service sees that account. ``accounts`` skips a test where the tests do not run as root.
"""

from __future__ import annotations

import http.client
import os
import socket
import threading
import time

import pytest

#: the uids the test clients use: nobody, then the ones below it (no entry in /etc/passwd needed)
FIRST_UID = 65534


def _serve(chan: socket.socket) -> None:
    """The helper's loop: connect as asked, hand the sockets over."""
    while True:
        msg = chan.recv(256)
        if not msg:
            return
        host, port, n = msg.decode().split()
        made = []
        for _ in range(int(n)):
            s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
            s.connect((host, int(port)))
            made.append(s)
        for i in range(0, len(made), 200):
            socket.send_fds(chan, [b"k"], [s.fileno() for s in made[i:i + 200]])
        for s in made:
            s.close()


class Account:
    """A machine account's connections to the service."""

    def __init__(self, uid: int) -> None:
        self.uid = uid
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()  # no new interpreter: the tests' Python may sit where the account cannot read
        if pid == 0:
            try:
                # none of the tests' other connections stays open in here: a connection the
                # tests close must close
                keep = theirs.fileno()
                os.closerange(3, keep)
                os.closerange(keep + 1, 1 << 20)
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                _serve(theirs)
            finally:
                os._exit(0)
        theirs.close()
        self.pid = pid
        self.chan = mine
        self._lock = threading.Lock()

    def sockets(self, port: int, n: int = 1, host: str = "127.0.0.1") -> list[socket.socket]:
        """``n`` sockets of this account connected to ``host:port``."""
        with self._lock:
            self.chan.sendall(f"{host} {port} {n}".encode())
            got: list[socket.socket] = []
            while len(got) < n:
                _, fds, _, _ = socket.recv_fds(self.chan, 16, 200)
                if not fds:
                    raise RuntimeError(f"the helper of uid {self.uid} made no socket")
                got += [socket.socket(fileno=fd) for fd in fds]
        return got

    def request(self, port: int, method: str, path: str, body: bytes | None = None,
                headers: dict | None = None, timeout: float = 60) -> tuple[int, bytes, float]:
        """One HTTP request from this account: status, body and seconds."""
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        sock = self.sockets(port)[0]
        sock.settimeout(timeout)
        conn.sock = sock
        t0 = time.perf_counter()
        try:
            conn.request(method, path, body=body,
                         headers={"Content-Type": "application/json", **(headers or {})})
            r = conn.getresponse()
            data = r.read()
            return r.status, data, time.perf_counter() - t0
        finally:
            conn.close()

    def close(self) -> None:
        self.chan.close()
        for _ in range(100):
            if os.waitpid(self.pid, os.WNOHANG)[0]:
                return
            time.sleep(0.05)
        os.kill(self.pid, 9)
        os.waitpid(self.pid, 0)


@pytest.fixture(scope="session")
def accounts():
    """``accounts(i)``: the i-th test account (made on first use, closed at the end)."""
    if os.geteuid() != 0:
        pytest.skip("playing several clients on loopback needs sockets of several machine accounts: run as root")
    made: dict[int, Account] = {}

    def get(i: int = 0) -> Account:
        if i not in made:
            made[i] = Account(FIRST_UID - i)
        return made[i]

    yield get
    for a in made.values():
        a.close()
