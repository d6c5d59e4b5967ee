"""``hearth rpc-worker``: lend this machine's memory (and GPU) to a Hearth on another machine.

It runs ggml's RPC server in this process (``ggml_backend_rpc_start_server`` from
llama-cpp-python's ``libggml-rpc``) on this machine's accelerators, or its CPU when it has
none. The other machine starts ``hearth serve --rpc HOST:PORT`` and the model's layers are
split over both. The RPC protocol has no authentication and no encryption: whoever reaches
the port can run computations and read what is sent. So the worker listens on loopback
unless the user names one address of this machine and says they know that.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

from runtime.backends.rpc_endpoint import DEFAULT_RPC_PORT, RpcEndpoint, hello

ACK_FLAG = "--i-know-rpc-has-no-authentication"
_WILDCARDS = {"0.0.0.0", "::", "", "*"}
START_TIMEOUT_S = 30.0


def add_parser(sub) -> None:
    p = sub.add_parser("rpc-worker", help="lend this machine's memory to a Hearth on another machine (ggml RPC)")
    p.add_argument("--host", default="127.0.0.1",
                   help=f"address to listen on (default %(default)s); another one needs {ACK_FLAG}")
    p.add_argument("--port", type=int, default=DEFAULT_RPC_PORT, help="port (default %(default)s)")
    p.add_argument("--mem", type=int, metavar="MIB",
                   help="memory offered, in MiB (default: the device's free memory); the other side plans with it")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: physical cores)")
    p.add_argument(ACK_FLAG, dest="no_auth_ok", action="store_true",
                   help="listen on the address named by --host although anyone who reaches it can use the worker "
                        "(private networks only, never the internet)")


def refusal(endpoint: RpcEndpoint, acknowledged: bool) -> str | None:
    """Why the worker must not listen there, or None."""
    if endpoint.host in _WILDCARDS:
        return (f"refusing to listen on every address ({endpoint.host or 'empty'}): name the one private "
                f"address other machines reach this one at, for example --host 192.168.1.20 {ACK_FLAG}")
    if not endpoint.loopback and not acknowledged:
        return (f"refusing to listen on {endpoint.host}: the RPC protocol has no authentication, so anyone "
                f"who reaches {endpoint} can use this machine's memory and processor and read what is sent. "
                f"On a private network you trust, add {ACK_FLAG}; never expose it to the internet")
    return None


def run(args: argparse.Namespace) -> int:
    endpoint = RpcEndpoint(args.host.strip("[]"), args.port)
    why = refusal(endpoint, args.no_auth_ok)
    if why:
        print(f"hearth rpc-worker: {why}", file=sys.stderr)
        return 2
    if args.mem is not None and args.mem <= 0:
        print("hearth rpc-worker: --mem must be a positive number of MiB", file=sys.stderr)
        return 2
    taken = _cannot_bind(endpoint)
    if taken:
        print(f"hearth rpc-worker: could not listen on {endpoint}: {taken}", file=sys.stderr)
        return 1
    from runtime.backends import ggml_rpc

    try:
        devices = ggml_rpc.serving_devices()
        for dev in devices:
            if args.mem is not None:
                ggml_rpc.offer_memory(dev, args.mem << 20)
    except ggml_rpc.GgmlUnavailable as e:
        print(f"hearth rpc-worker: {e}", file=sys.stderr)
        return 1
    threads = args.threads or _physical_cores()
    server = threading.Thread(target=ggml_rpc.serve, args=(str(endpoint), devices, threads), daemon=True)
    server.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    while server.is_alive() and hello(endpoint, 1.0).state != "ready":
        if time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if not server.is_alive() or time.monotonic() > deadline:
        print(f"hearth rpc-worker: could not listen on {endpoint}: is the port taken, or the address not "
              "this machine's?", file=sys.stderr)
        return 1
    names = ", ".join(f"{n} ({d})" for n, d in map(ggml_rpc.describe, devices))
    offered = f"{args.mem} MiB offered" if args.mem is not None else "its free memory offered"
    print(f"Hearth RPC worker listening on {endpoint}: {names}, {offered}.\n"
          f"On the other machine: hearth serve --rpc {endpoint}", flush=True)
    try:
        while server.is_alive():
            server.join(1.0)
    except KeyboardInterrupt:
        pass
    sys.stdout.flush()
    os._exit(0)  # the server thread never returns from C; nothing else is left to clean up


def _cannot_bind(endpoint: RpcEndpoint) -> str | None:
    """Why ggml's server could not listen there (a port taken, an address not this machine's):
    asked first, since a handshake on a taken port would reach whoever holds it."""
    import socket

    try:
        infos = socket.getaddrinfo(endpoint.host, endpoint.port, type=socket.SOCK_STREAM)
        with socket.socket(infos[0][0], socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ggml's server does
            s.bind(infos[0][4])
    except OSError as e:
        return e.strerror or str(e)
    return None


def _physical_cores() -> int:
    import psutil

    return max(1, psutil.cpu_count(logical=False) or os.cpu_count() or 1)
