"""What this machine has for running models: CPU, RAM, GPUs, the llama.cpp build, bandwidth.

``probe()`` is cheap (milliseconds) except the first time on a machine, when it measures RAM
bandwidth (about a second) and caches it in the data directory.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence

from runtime.backends import ggml_devices
from runtime.backends.ggml_devices import BuildInfo, GgmlDevice, GgmlUnavailable
from runtime.backends.rpc_endpoint import RpcState, hello, parse_endpoint
from runtime.hardware import bandwidth as bw
from runtime.hardware.backend import backend_status
from runtime.hardware.cpu import cpu_info
from runtime.hardware.gpus import GpuInfo, gpus_from_ggml, machine_gpus
from runtime.hardware.info import HardwareInfo, RamInfo


def register_rpc(endpoints: Sequence[str]) -> list[RpcState]:
    """Register the RPC workers that answer (in order) as ggml devices of this process; the
    state of each. A worker that is down, busy with another client or of another protocol
    version is left out, so a plan never counts a device a load could not reach."""
    from runtime.backends.ggml_rpc import add_servers

    states = []
    for text in endpoints:
        state = hello(parse_endpoint(text))
        if state.state == "ready":
            try:
                add_servers([state.endpoint])
            except GgmlUnavailable as e:
                state = RpcState(state.endpoint, "unavailable", state.version, str(e))
        states.append(state)
    return states


def remote_gpus(endpoints: Sequence[str]) -> tuple[list[GpuInfo], list[RpcState]]:
    """The RPC workers' devices as the planner counts them (the ready ones), and every worker's
    state. Registers them in this process: the service runs it in a child (``in_subprocess``)."""
    states = register_rpc(endpoints)
    ready = {s.endpoint for s in states if s.state == "ready"}
    devices = [d for d in ggml_devices.list_devices() if d.backend == "RPC" and d.description in ready]
    return [g for g in gpus_from_ggml(devices) if g.remote], states


def _ggml() -> tuple[list[GgmlDevice], BuildInfo | None]:
    try:
        return ggml_devices.list_devices(), ggml_devices.build_info()
    except (GgmlUnavailable, OSError):
        # No usable llama.cpp: the probe still describes the machine, with no backend.
        return [], None


def probe(measure_bandwidth: bool = True, remeasure: bool = False, rpc: Sequence[str] = ()) -> HardwareInfo:
    """Describe this machine; measure its RAM bandwidth once (cached) unless told not to.

    ``remeasure`` measures the bandwidth again and forgets the decode calibration. ``rpc``:
    ggml RPC workers (``HOST:PORT``) whose devices count as this machine's (``register_rpc``).
    """
    import psutil

    states = register_rpc(rpc) if rpc else []
    devices, build = _ggml()
    llama_features = ggml_devices.system_info_features(build.system_info) if build else []
    cpu = cpu_info(llama_features)
    mem = psutil.virtual_memory()
    ram = RamInfo(total=int(mem.total), available=int(mem.available))
    os_name, arch = platform.system(), platform.machine()
    gpus = machine_gpus(devices, os_name, arch, cpu.model, ram.total, ram.available)
    status = backend_status(build.backends if build else [], bool(build and build.gpu_offload),
                            gpus, os_name, arch)
    fingerprint = bw.machine_fingerprint(cpu.model, cpu.logical_cores, ram.total)
    bandwidth = bw.cached_bandwidth(fingerprint, cpu.physical_cores, ram.available, measure_bandwidth,
                                    force=remeasure)
    decode = bw.load_cache(fingerprint).get("decode") or {}
    if decode.get("bandwidth") != bandwidth:  # calibrated against another bandwidth figure
        decode = {}
    return HardwareInfo(
        os=os_name, os_release=platform.release(), cpu=cpu, ram=ram, gpus=gpus,
        backend=status, devices=devices, build=build, memory_bandwidth=bandwidth,
        decode_efficiency=decode.get("efficiency"), decode_fixed_s=float(decode.get("fixed_s") or 0.0),
        fingerprint=fingerprint, rpc=states,
    )


def _probe_child(conn, fn, args: tuple) -> None:
    try:
        _answer(conn, fn, args)
    finally:
        conn.close()


def probe_child_answer(conn, args: tuple) -> None:
    """In a process that may load llama.cpp (the spare engine worker): ``probe(*args)``'s result,
    or its error, sent on ``conn`` as ``probe_in_subprocess`` receives it."""
    _answer(conn, probe, args)


def _answer(conn, fn, args: tuple) -> None:
    try:
        conn.send(("ok", fn(*args)))
    except BaseException as e:  # sent back to the parent, which raises it
        conn.send(("error", f"{type(e).__name__}: {e}"))


def probe_in_subprocess(measure_bandwidth: bool = True, remeasure: bool = False,
                        timeout: float = 60.0) -> HardwareInfo:
    """``probe()`` in a fresh ``spawn`` process, for a process that must not load llama.cpp.

    Listing a CUDA device's free memory creates a CUDA context (hundreds of MB of VRAM) that
    lives as long as the process; the long-lived service should not hold one.
    """
    return in_subprocess(probe, (measure_bandwidth, remeasure), timeout)


def in_subprocess(fn, args: tuple, timeout: float = 60.0):
    """``fn(*args)`` (a probe function) in a fresh ``spawn`` process; its result comes back.
    An RPC worker's registration, like a CUDA context, then ends with that process."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_probe_child, args=(child, fn, args), daemon=True)
    proc.start()
    child.close()
    try:
        if not parent.poll(timeout):
            raise RuntimeError(f"the hardware probe took more than {timeout:.0f} s: stopped")
        status, payload = parent.recv()
    except EOFError:
        raise RuntimeError("the hardware probe process died: run `hearth probe` to see why") from None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        parent.close()
    if status != "ok":
        raise RuntimeError(f"the hardware probe failed: {payload}")
    return payload
