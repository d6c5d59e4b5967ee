"""``hearth rpc-worker`` processes on loopback, for the tests and the benchmark."""

from __future__ import annotations

import subprocess
import threading
import time

from runtime.self_command import hearth_argv
from runtime.server.launcher import free_port

READY = "Hearth RPC worker listening on"


class RpcWorker:
    """One ``hearth rpc-worker`` on 127.0.0.1; ``lines`` is what it printed so far."""

    def __init__(self, mem_mib: int | None = None, threads: int = 1) -> None:
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        argv = [*hearth_argv(), "rpc-worker", "--port", str(self.port), "--threads", str(threads)]
        if mem_mib is not None:
            argv += ["--mem", str(mem_mib)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_ready(self, timeout: float = 60.0) -> "RpcWorker":
        deadline = time.monotonic() + timeout
        while not any(READY in line for line in self.lines):
            if self.proc.poll() is not None:
                self._reader.join(2)
                raise RuntimeError(f"hearth rpc-worker exited with {self.proc.returncode}: " + "\n".join(self.lines))
            if time.monotonic() > deadline:
                raise TimeoutError(f"hearth rpc-worker on {self.endpoint} not ready after {timeout:.0f} s")
            time.sleep(0.05)
        return self

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def start_workers(n: int, mem_mib: int | None = None, threads: int = 1) -> list[RpcWorker]:
    workers = [RpcWorker(mem_mib, threads) for _ in range(n)]
    try:
        return [w.wait_ready() for w in workers]
    except Exception:
        for w in workers:
            w.stop()
        raise
