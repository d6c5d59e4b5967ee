"""ggml's RPC backend through libggml-rpc: ``hearth rpc-worker`` serves this machine's CPU with
the memory it is told to offer, ``hearth probe --rpc`` registers it as a ggml device and reports
it, the handshake tells ready, busy and down apart without hanging, and the worker refuses to
listen beyond loopback unless the user names the address and acknowledges the risk.

Everything that makes ggml's client connect runs in a child process: ggml aborts the process
whose RPC server goes away."""

from __future__ import annotations

import json
import socket
import struct
import subprocess

import pytest

from runtime.backends.ggml_rpc import rpc_built
from runtime.backends.rpc_endpoint import RpcEndpoint, RpcEndpointError, hello, parse_endpoint, parse_endpoints
from runtime.self_command import hearth_argv
from runtime.server.launcher import free_port
from tests.rpc_workers import RpcWorker

needs_rpc = pytest.mark.skipif(not rpc_built(), reason="llama-cpp-python built without GGML_RPC: run `make test`")


@pytest.fixture(scope="module")
def worker():
    w = RpcWorker(mem_mib=300).wait_ready()
    yield w
    w.stop()


def hearth(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*hearth_argv(), *args], capture_output=True, text=True, timeout=timeout)


def test_endpoints_parse_and_bad_ones_say_what_is_expected():
    assert parse_endpoint("192.168.1.20:50052") == RpcEndpoint("192.168.1.20", 50052)
    assert str(parse_endpoint("[::1]:7000")) == "[::1]:7000" and parse_endpoint("[::1]:7000").loopback
    assert parse_endpoints("a:1, b:2,a:1") == (RpcEndpoint("a", 1), RpcEndpoint("b", 2))
    assert parse_endpoint("localhost:1").loopback and not parse_endpoint("10.0.0.2:1").loopback
    for bad in ("host", "host:", ":50052", "host:0", "host:70000", "host:port"):
        with pytest.raises(RpcEndpointError, match="HOST:PORT"):
            parse_endpoint(bad)


@needs_rpc
def test_the_worker_offers_the_memory_it_is_told_and_the_probe_lists_its_device(worker):
    assert any("CPU" in line and "300 MiB offered" in line for line in worker.lines)
    r = hearth("probe", "--json", "--rpc", worker.endpoint)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["rpc"] == [{"endpoint": worker.endpoint, "state": "ready", "version": "7.0.0", "detail": ""}]
    remote = [g for g in info["gpus"] if g["remote"]]
    assert len(remote) == 1 and remote[0]["name"] == worker.endpoint and remote[0]["device"] == "RPC0"
    assert remote[0]["memory_total"] == 300 << 20 and 0 < remote[0]["memory_free"] <= 300 << 20
    assert "RPC" in info["build"]["backends"]
    text = hearth("probe", "--rpc", worker.endpoint).stdout
    assert f"RPC worker {worker.endpoint}: 300 MB" in text and "used by llama.cpp as RPC0" in text


@needs_rpc
def test_a_worker_serving_another_client_is_busy_and_a_closed_port_is_down(worker):
    with socket.create_connection(("127.0.0.1", worker.port), timeout=5) as held:
        held.sendall(struct.pack("<BQ", 14, 24) + bytes(24))  # HELLO, then keep the session open
        assert len(held.recv(64)) > 0
        assert hello(parse_endpoint(worker.endpoint), timeout=1.0).state == "busy"
    down = hello(parse_endpoint(f"127.0.0.1:{free_port()}"), timeout=1.0)
    assert down.state == "down" and down.detail
    assert hello(parse_endpoint(worker.endpoint), timeout=5.0).state == "ready"  # served again once freed


@needs_rpc
def test_a_model_pointed_at_a_worker_that_is_down_fails_to_load_with_a_clear_error(smollm2_path):
    from runtime.backends.errors import ModelLoadError
    from runtime.backends.llama import ContextConfig, LlamaBackend

    endpoint = f"127.0.0.1:{free_port()}"
    with pytest.raises(ModelLoadError, match=f"RPC worker {endpoint} is down.*hearth rpc-worker"):
        LlamaBackend(smollm2_path, ContextConfig(n_ctx=512, rpc=(endpoint,)))


def test_the_worker_refuses_every_address_and_unacknowledged_ones():
    r = hearth("rpc-worker", "--host", "0.0.0.0", timeout=30)
    assert r.returncode == 2 and "refusing to listen on every address" in r.stderr
    r = hearth("rpc-worker", "--host", "192.0.2.10", timeout=30)
    assert r.returncode == 2 and "no authentication" in r.stderr and "--i-know-rpc-has-no-authentication" in r.stderr


@needs_rpc
def test_a_taken_port_is_an_error_not_a_hang(worker):
    r = hearth("rpc-worker", "--port", str(worker.port), timeout=60)
    assert r.returncode == 1 and "could not listen" in r.stderr
