"""ggml RPC endpoints: ``HOST:PORT`` parsing and a handshake with a time limit.

ggml's RPC client aborts the whole process when it cannot connect to an endpoint or when the
server goes away mid-session, and waits forever on a server that is busy: an ``rpc-server``
serves one client at a time and queues the next connection until the first one ends. So
before llama.cpp is pointed at an endpoint, Hearth speaks the protocol's first message itself,
with a timeout, and tells the user what it found. This module uses only sockets: the service
reports the workers' state (``/health``) without loading llama.cpp.

The handshake (ggml-rpc.cpp, protocol 7.x): the client sends ``| cmd = 14 (HELLO) : 1 byte |
size : uint64 | conn_caps : 24 bytes |``; the server answers ``| size : uint64 | major, minor,
patch, pad : 4 bytes | conn_caps : 24 bytes |``. Closing the socket after it ends that session.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass

RPC_CMD_HELLO = 14
RPC_PROTO_MAJOR = 7
_CONN_CAPS_SIZE = 24
_HELLO_RSP_SIZE = 4 + _CONN_CAPS_SIZE
DEFAULT_RPC_PORT = 50052


class RpcEndpointError(ValueError):
    """An endpoint that is not ``HOST:PORT``."""


@dataclass(slots=True, frozen=True)
class RpcEndpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def parse_endpoint(text: str, default_port: int | None = None) -> RpcEndpoint:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) as an endpoint; RpcEndpointError when malformed."""
    text = text.strip()
    host, sep, port = text.rpartition(":")
    if text.startswith("[") and "]" in text:
        host, _, rest = text[1:].partition("]")
        sep, port = (":", rest[1:]) if rest.startswith(":") else ("", "")
    if not sep:
        host, port = text, ""
    if not port and default_port is not None:
        port = str(default_port)
    if not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise RpcEndpointError(f"{text!r} is not HOST:PORT (for example 192.168.1.20:{DEFAULT_RPC_PORT})")
    return RpcEndpoint(host, int(port))


def parse_endpoints(text: str) -> tuple[RpcEndpoint, ...]:
    """A comma-separated list of ``HOST:PORT``, in order, without repeats."""
    out: list[RpcEndpoint] = []
    for part in text.split(","):
        if part.strip():
            ep = parse_endpoint(part)
            if ep not in out:
                out.append(ep)
    if not out:
        raise RpcEndpointError("no RPC endpoint given: use HOST:PORT[,HOST:PORT...]")
    return tuple(out)


@dataclass(slots=True)
class RpcState:
    """What a handshake found: ``ready`` (answered), ``busy`` (accepted the connection but serves
    another client), ``down`` (refused or unreachable) or ``incompatible`` (another protocol)."""

    endpoint: str
    state: str
    version: str | None = None
    detail: str = ""

    def to_dict(self) -> dict:
        return {"endpoint": self.endpoint, "state": self.state, "version": self.version, "detail": self.detail}


def hello(endpoint: RpcEndpoint, timeout: float = 2.0) -> RpcState:
    """Connect, send HELLO, read the answer within ``timeout`` seconds, close."""
    name = str(endpoint)
    try:
        sock = socket.create_connection((endpoint.host, endpoint.port), timeout=timeout)
    except OSError as e:
        return RpcState(name, "down", detail=e.strerror or str(e))
    try:
        sock.sendall(struct.pack("<BQ", RPC_CMD_HELLO, _CONN_CAPS_SIZE) + bytes(_CONN_CAPS_SIZE))
        head = _read(sock, 8)
        (size,) = struct.unpack("<Q", head)
        if size != _HELLO_RSP_SIZE:
            return RpcState(name, "incompatible", detail=f"unexpected HELLO answer of {size} bytes")
        major, minor, patch = _read(sock, size)[:3]
    except TimeoutError:
        return RpcState(name, "busy", detail="the worker serves another client (one at a time)")
    except (OSError, EOFError) as e:
        return RpcState(name, "down", detail=str(e) or type(e).__name__)
    finally:
        sock.close()
    version = f"{major}.{minor}.{patch}"
    if major != RPC_PROTO_MAJOR:
        return RpcState(name, "incompatible", version,
                        f"protocol {version}, this build speaks {RPC_PROTO_MAJOR}.x: install the same Hearth on both")
    return RpcState(name, "ready", version)


def _read(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("the connection closed")
        buf += chunk
    return buf
