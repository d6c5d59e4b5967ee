"""A real ``hearth serve`` process on a free loopback port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    def __init__(self, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runtime.cli", "serve", "--port", str(self.port), *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=dict(os.environ), text=True,
        )
        self.wait_ready()

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.proc.stdout.read()}")
            try:
                h = httpx.get(f"{self.url}/health", timeout=1).json()
                if h["engine"]["state"] == "running":
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError("server did not become ready")

    def stats(self) -> dict:
        return httpx.get(f"{self.url}/hearth/stats", timeout=5).json()

    def health(self) -> dict:
        return httpx.get(f"{self.url}/health", timeout=5).json()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module")
def server(smollm2_path):
    s = LiveServer("--parallel", "4", "--ctx", "4096")
    yield s
    s.stop()


@pytest.fixture()
def oai(server):
    from openai import OpenAI

    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)
