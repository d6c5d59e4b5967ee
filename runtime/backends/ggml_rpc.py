"""ggml's RPC backend (``libggml-rpc``): other machines' memory as llama.cpp devices.

Client side: ``add_servers`` registers each ``rpc-server`` endpoint in ggml's device registry
(``ggml_backend_rpc_add_server`` + ``ggml_backend_register``, as llama-server's ``--rpc``
does), so every registered endpoint shows up as a device named ``RPC<n>`` (type GPU, its
description the endpoint) and llama.cpp can put layers on it. ``device_list`` builds the
NULL-terminated ``llama_model_params.devices`` array in the order the fit planner counted:
the RPC devices first (as llama.cpp's own default order), then this machine's GPUs.

Server side: ``serve`` runs ``ggml_backend_rpc_start_server`` on this machine's devices (the
accelerators, or the CPU when there are none), blocking the calling thread. ``offer_memory``
makes a device report a smaller memory than the machine has (``hearth rpc-worker --mem``): the
client's planner and llama.cpp's default split read what the worker reports.

ggml's client aborts the process on an endpoint it cannot reach and waits forever on one
that serves another client, so endpoints are checked with ``rpc_endpoint.hello`` first.
A registration lasts as long as the process (ggml has no way to unregister a backend).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from runtime.backends.ggml_devices import GgmlDevice, GgmlUnavailable, ggml_library, library_dir, list_devices
from runtime.backends.rpc_endpoint import hello, parse_endpoint

#: ggml-backend.h: enum ggml_backend_dev_type
_DEV_CPU, _DEV_ACCEL = 0, 3
#: ggml-backend-impl.h: struct ggml_backend_device_i begins get_name, get_description,
#: get_memory, ... and struct ggml_backend_device begins with it
_IFACE_GET_MEMORY = 2
_GET_MEMORY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                               ctypes.POINTER(ctypes.c_size_t))
REBUILD_HINT = ("reinstall llama-cpp-python with ggml's RPC backend: `make test` or `make serve` does it, or "
                "CMAKE_ARGS=-DGGML_RPC=on pip install --force-reinstall --no-deps --no-cache-dir "
                "--no-binary llama-cpp-python llama-cpp-python")


class RpcUnavailable(GgmlUnavailable):
    """No RPC backend in this build, or an endpoint that cannot be used now."""


def rpc_library_file(folder: Path) -> Path | None:
    """libggml-rpc in llama-cpp-python's library folder, or None for a build without it."""
    names = {"win32": ["ggml-rpc.dll", "libggml-rpc.dll"],
             "darwin": ["libggml-rpc.dylib", "libggml-rpc.so"]}.get(sys.platform, ["libggml-rpc.so"])
    return next((folder / n for n in names if (folder / n).is_file()), None)


def rpc_built() -> bool:
    """Whether this llama-cpp-python has the RPC backend (without loading llama.cpp)."""
    import importlib.util

    spec = importlib.util.find_spec("llama_cpp")
    return bool(spec and spec.origin and rpc_library_file(Path(spec.origin).parent / "lib"))


@lru_cache(maxsize=1)
def _rpc() -> ctypes.CDLL:
    ggml_library()  # libllama, libggml and the backends first: the same registry
    path = rpc_library_file(library_dir())
    if path is None:
        raise RpcUnavailable(f"this llama-cpp-python has no RPC backend (no libggml-rpc): {REBUILD_HINT}")
    lib = ctypes.CDLL(str(path))
    lib.ggml_backend_rpc_add_server.argtypes = [ctypes.c_char_p]
    lib.ggml_backend_rpc_add_server.restype = ctypes.c_void_p
    lib.ggml_backend_rpc_start_server.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                                  ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
    lib.ggml_backend_rpc_start_server.restype = None
    return lib


_registered: set[str] = set()


def add_servers(endpoints: Sequence[str], timeout: float = 5.0) -> list[GgmlDevice]:
    """Register each endpoint's devices in ggml's registry (once per process) and return them,
    in the endpoints' order. RpcUnavailable names the endpoint that is down, busy or foreign."""
    lib, rpc = ggml_library(), _rpc()
    names = []
    for text in endpoints:
        name = str(parse_endpoint(text))
        names.append(name)
        if name in _registered:
            continue
        state = hello(parse_endpoint(name), timeout)
        if state.state != "ready":
            raise RpcUnavailable(f"RPC worker {name} is {state.state}: {state.detail}; start it with "
                                 f"`hearth rpc-worker` on that machine, or leave it out of --rpc")
        reg = rpc.ggml_backend_rpc_add_server(name.encode())
        if not reg:
            raise RpcUnavailable(f"RPC worker {name} offers no device")
        lib.ggml_backend_register(reg)
        _registered.add(name)
    devices = list_devices()
    return [d for name in names for d in devices if d.backend == "RPC" and d.description == name]


def device_list(rpc_devices: Sequence[GgmlDevice]) -> ctypes.Array:
    """``llama_model_params.devices``: the RPC devices, then this machine's GPUs, NULL-ended.
    The caller keeps the array alive until the model has loaded."""
    lib = ggml_library()
    local = [d.name for d in list_devices() if d.kind in ("gpu", "igpu") and d.backend != "RPC"]
    handles = [lib.ggml_backend_dev_by_name(n.encode()) for n in [d.name for d in rpc_devices] + local]
    if not all(handles):
        raise RpcUnavailable("a device vanished from ggml's registry while the model was loading")
    return (ctypes.c_void_p * (len(handles) + 1))(*handles, None)


def serving_devices() -> list[int]:
    """What ``rpc-server`` serves: this machine's accelerators, or the CPU when it has none."""
    lib = ggml_library()
    devs = [lib.ggml_backend_dev_get(i) for i in range(lib.ggml_backend_dev_count())]
    gpus = [d for d in devs if lib.ggml_backend_dev_type(d) not in (_DEV_CPU, _DEV_ACCEL)]
    return gpus or [lib.ggml_backend_dev_by_type(_DEV_CPU)]


_offers: list = []  # the callbacks C holds


def offer_memory(device: int, limit: int) -> tuple[int, int]:
    """Make ``device`` report at most ``limit`` bytes (free and total) to every caller in this
    process, the RPC server's clients included; returns (free, total) as now reported.

    ggml has no setting for this, so the device's ``get_memory`` entry is replaced; only the
    RPC worker's own process does it. Memory use is not enforced: the client plans with it."""
    lib = ggml_library()
    slots = ctypes.cast(device, ctypes.POINTER(ctypes.c_void_p))
    name_before = lib.ggml_backend_dev_name(device)
    real = _GET_MEMORY(slots[_IFACE_GET_MEMORY])

    @_GET_MEMORY
    def get_memory(dev, free, total):
        real(dev, free, total)
        free[0], total[0] = min(free[0], limit), limit

    _offers.append((real, get_memory))
    slots[_IFACE_GET_MEMORY] = ctypes.cast(get_memory, ctypes.c_void_p).value
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    lib.ggml_backend_dev_memory(device, ctypes.byref(free), ctypes.byref(total))
    if total.value != limit or lib.ggml_backend_dev_name(device) != name_before:
        raise RpcUnavailable("this ggml's device layout is not the one Hearth knows: --mem cannot be applied")
    return free.value, total.value


def describe(device: int) -> tuple[str, str]:
    """(name, description) of a device handle."""
    lib = ggml_library()
    return (lib.ggml_backend_dev_name(device) or b"").decode(), (lib.ggml_backend_dev_description(device) or b"").decode()


def serve(endpoint: str, devices: Sequence[int], threads: int, cache_dir: str | None = None) -> None:
    """Run the RPC server on ``endpoint`` (``HOST:PORT``) over ``devices``. Blocks for as long as it
    serves; returning at all means it could not start (the port taken, the address not ours)."""
    rpc = _rpc()
    handles = (ctypes.c_void_p * len(devices))(*devices)
    rpc.ggml_backend_rpc_start_server(endpoint.encode(), cache_dir.encode() if cache_dir else None,
                                      threads, len(devices), handles)
