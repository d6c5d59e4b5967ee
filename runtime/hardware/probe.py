"""What this machine has for running models: CPU, RAM, GPUs, the llama.cpp build, bandwidth.

``probe()`` is cheap (milliseconds) except the first time on a machine, when it measures RAM
bandwidth (about a second) and caches it in the data directory.
"""

from __future__ import annotations

import platform

from runtime.backends import ggml_devices
from runtime.backends.ggml_devices import BuildInfo, GgmlDevice, GgmlUnavailable
from runtime.hardware import bandwidth as bw
from runtime.hardware.backend import backend_status
from runtime.hardware.cpu import cpu_info
from runtime.hardware.gpus import machine_gpus
from runtime.hardware.info import HardwareInfo, RamInfo


def _ggml() -> tuple[list[GgmlDevice], BuildInfo | None]:
    try:
        return ggml_devices.list_devices(), ggml_devices.build_info()
    except (GgmlUnavailable, OSError):
        # No usable llama.cpp: the probe still describes the machine, with no backend.
        return [], None


def probe(measure_bandwidth: bool = True, remeasure: bool = False) -> HardwareInfo:
    """Describe this machine; measure its RAM bandwidth once (cached) unless told not to.

    ``remeasure`` measures the bandwidth again and forgets the decode calibration.
    """
    import psutil

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
        fingerprint=fingerprint,
    )


def _probe_child(conn, measure_bandwidth: bool, remeasure: bool) -> None:
    try:
        conn.send(("ok", probe(measure_bandwidth, remeasure)))
    except BaseException as e:  # sent back to the parent, which raises it
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def probe_in_subprocess(measure_bandwidth: bool = True, remeasure: bool = False,
                        timeout: float = 60.0) -> HardwareInfo:
    """``probe()`` in a fresh ``spawn`` process, for a process that must not load llama.cpp.

    Listing a CUDA device's free memory creates a CUDA context (hundreds of MB of VRAM) that
    lives as long as the process; the long-lived service should not hold one.
    """
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_probe_child, args=(child, measure_bandwidth, remeasure), daemon=True)
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
