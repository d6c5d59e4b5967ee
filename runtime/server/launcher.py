"""Start ``hearth serve`` as a child process and wait until its model is loaded.

Used by whatever needs a service of its own: the desktop app's tray service, the
benchmarks, and the tests.
"""

from __future__ import annotations

import collections
import json
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

from runtime.self_command import hearth_argv


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ServiceProcess:
    """The service's log is read as it comes, as a terminal would (a pipe nobody reads fills and
    stops the service mid-write); the last ``LOG_LINES`` lines are kept for ``output()``."""

    LOG_LINES = 2000

    def __init__(self, *args: str, port: int | None = None, host: str = "127.0.0.1",
                 env: dict[str, str] | None = None) -> None:
        self.port = port or free_port(host)
        self.url = f"http://{host}:{self.port}"
        self.proc = subprocess.Popen(
            [*hearth_argv(), "serve", "--host", host, "--port", str(self.port), *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env or dict(os.environ),
        )
        self.log: collections.deque[str] = collections.deque(maxlen=self.LOG_LINES)
        self._reader = threading.Thread(target=self._read_log, daemon=True)
        self._reader.start()

    def _read_log(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.append(line)

    def output(self) -> str:
        """The last lines the service wrote: all of them once it has exited."""
        if self.proc.poll() is not None:
            self._reader.join(5)
        return "".join(self.log)

    def get(self, path: str, timeout: float = 5.0) -> dict:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=timeout) as r:
            return json.loads(r.read())

    def health(self) -> dict:
        return self.get("/health")

    def stats(self) -> dict:
        return self.get("/hearth/stats")

    def wait_ready(self, timeout: float = 180.0) -> "ServiceProcess":
        """Block until /health reports the engine running; raise with the log if it exits."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"hearth serve exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if self.health()["engine"]["state"] == "running":
                    return self
            except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"hearth serve on port {self.port} was not ready after {timeout:.0f} s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
