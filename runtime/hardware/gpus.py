"""GPUs: the ones this llama.cpp build can use (ggml devices) and the ones it cannot.

A GPU that ggml lists is usable as is. When the build has no GPU backend, the machine's GPUs
are still looked for, so the user can be told which build to install: NVIDIA through NVML
(``pynvml``, when importable) or ``nvidia-smi``, Apple silicon through the OS (unified memory),
AMD and Intel through Linux's ``/sys/class/drm``.

Memory bandwidth is not something ggml reports; it comes from the table below of published
peak figures, matched on the device name, with a conservative default for unknown names.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.backends.ggml_devices import GgmlDevice

MIB = 1 << 20
GB = 1e9
#: Published peak memory bandwidth (GB/s), matched by substring of the lower-cased name;
#: the first match wins, so more specific names come first.
_BANDWIDTH_GBPS = [
    ("h200", 4800), ("h100 pcie", 2000), ("h100", 3350), ("a100-sxm4-80gb", 2039),
    ("a100 80gb", 1935), ("a100", 1555), ("l40s", 864), ("l40", 864), ("l4", 300),
    ("a10g", 600), ("a10", 600), ("t4", 320), ("v100", 900),
    ("rtx 5090", 1792), ("rtx 5080", 960), ("rtx 5070 ti", 896), ("rtx 5070", 672),
    ("rtx 4090", 1008), ("rtx 4080", 717), ("rtx 4070 ti", 504), ("rtx 4070", 504),
    ("rtx 4060 ti", 288), ("rtx 4060", 272), ("rtx 3090", 936), ("rtx 3080", 760),
    ("rtx 3070", 448), ("rtx 3060 ti", 448), ("rtx 3060", 360), ("rtx 3050", 224),
    ("rtx 2080", 448), ("rtx 2070", 448), ("rtx 2060", 336), ("gtx 1660", 192),
    ("gtx 1650", 128), ("gtx 1080", 320), ("gtx 1070", 256), ("mx", 56),
    ("rx 7900 xtx", 960), ("rx 7900", 800), ("rx 7800", 624), ("rx 7600", 288),
    ("rx 6900", 512), ("rx 6800", 512), ("rx 6700", 384), ("rx 6600", 224),
    ("m4 max", 546), ("m4 pro", 273), ("m4", 120), ("m3 ultra", 819), ("m3 max", 400),
    ("m3 pro", 150), ("m3", 100), ("m2 ultra", 800), ("m2 max", 400), ("m2 pro", 200),
    ("m2", 100), ("m1 ultra", 800), ("m1 max", 400), ("m1 pro", 200), ("m1", 68),
]
DEFAULT_DISCRETE_GBPS = 300.0
#: an RPC worker's device: what its host reads weights at is not known here, and every token
#: also crosses the network (not counted): a figure near a CPU's, so the planner never prefers
#: one for speed (bench/rpc.py measures the real cost)
RPC_GBPS = 20.0
DEFAULT_INTEGRATED_GBPS = 60.0
_PCI_VENDORS = {"0x10de": "nvidia", "0x1002": "amd", "0x8086": "intel"}


@dataclass(slots=True)
class GpuInfo:
    name: str
    vendor: str  #: nvidia | amd | intel | apple | other
    memory_total: int
    memory_free: int
    unified: bool  #: memory shared with the CPU (Apple silicon, integrated GPUs)
    source: str  #: ggml | nvml | nvidia-smi | os
    device: str | None = None  #: the ggml device name ("CUDA0", "MTL0") when this build can use it
    backend: str | None = None  #: the ggml backend ("CUDA", "MTL", "Vulkan") when usable
    bandwidth: float = 0.0  #: bytes/s, published peak

    @property
    def usable(self) -> bool:
        return self.device is not None

    @property
    def remote(self) -> bool:
        """A device lent by a ggml RPC worker (``hearth rpc-worker``); ``name`` is its endpoint."""
        return self.backend == "RPC"

    def to_dict(self) -> dict:
        return {
            "name": self.name, "vendor": self.vendor, "memory_total": self.memory_total,
            "memory_free": self.memory_free, "unified": self.unified, "source": self.source,
            "device": self.device, "backend": self.backend, "usable": self.usable, "remote": self.remote,
            "bandwidth_bytes_per_s": self.bandwidth,
        }


def spec_bandwidth(name: str, unified: bool) -> float:
    """Published peak bandwidth (bytes/s) for a GPU name, or a conservative default."""
    low = name.lower()
    for key, gbps in _BANDWIDTH_GBPS:
        if key in low:
            return gbps * GB
    return (DEFAULT_INTEGRATED_GBPS if unified else DEFAULT_DISCRETE_GBPS) * GB


def vendor_of(name: str) -> str:
    low = name.lower()
    for needle, vendor in (("nvidia", "nvidia"), ("geforce", "nvidia"), ("quadro", "nvidia"),
                           ("tesla", "nvidia"), ("apple", "apple"), ("amd", "amd"),
                           ("radeon", "amd"), ("intel", "intel")):
        if needle in low:
            return vendor
    return "other"


def _gpu(name: str, total: int, free: int, unified: bool, source: str,
         device: str | None = None, backend: str | None = None) -> GpuInfo:
    return GpuInfo(name, vendor_of(name), total, free, unified, source, device, backend,
                   spec_bandwidth(name, unified))


def is_metal(backend: str) -> bool:
    return backend.lower() in ("metal", "mtl")


def gpus_from_ggml(devices: list[GgmlDevice]) -> list[GpuInfo]:
    """The GPUs among ggml's devices (discrete or integrated); Metal is unified memory. RPC
    workers' devices come first, as in llama.cpp's own device order (``tensor_split`` indexes it)."""
    gpus = [GpuInfo(d.description, "other", d.memory_total, d.memory_free, False, "rpc", d.name, "RPC",
                    RPC_GBPS * GB) for d in devices if d.backend == "RPC"]
    for d in devices:
        if d.kind not in ("gpu", "igpu") or d.backend == "RPC":
            continue
        unified = d.kind == "igpu" or is_metal(d.backend)
        gpus.append(_gpu(d.description or d.name, d.memory_total, d.memory_free, unified,
                         "ggml", device=d.name, backend=d.backend))
    return gpus


def parse_nvidia_smi(text: str) -> list[GpuInfo]:
    """GPUs from ``nvidia-smi --query-gpu=name,memory.total,memory.free --format=csv,noheader,nounits``.

    Each line is ``name, total MiB, free MiB``.
    """
    gpus = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3 or not (parts[1] + parts[2]).isascii() or not parts[1].isdigit() or not parts[2].isdigit():
            continue
        gpus.append(_gpu(parts[0], int(parts[1]) * MIB, int(parts[2]) * MIB, False, "nvidia-smi"))
    return gpus


def _nvml_gpus() -> list[GpuInfo] | None:
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError: no driver on this machine
        return None
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else name
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(_gpu(name, int(mem.total), int(mem.free), False, "nvml"))
        return gpus
    finally:
        pynvml.nvmlShutdown()


def _nvidia_smi_gpus() -> list[GpuInfo]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    query = [exe, "--query-gpu=name,memory.total,memory.free", "--format=csv,noheader,nounits"]
    try:
        out = subprocess.run(query, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_nvidia_smi(out.stdout) if out.returncode == 0 else []


def scan_drm(root: Path = Path("/sys/class/drm")) -> list[GpuInfo]:
    """AMD and Intel GPUs from Linux's DRM sysfs (``cardN/device/vendor``, VRAM files).

    NVIDIA cards are left to NVML / nvidia-smi, which know their names.
    """
    gpus = []
    for card in sorted(root.glob("card[0-9]*")):
        if "-" in card.name:  # connectors such as card0-HDMI-A-1
            continue
        dev = card / "device"
        vendor = _PCI_VENDORS.get(_read(dev / "vendor"), "other")
        if vendor not in ("amd", "intel"):
            continue
        total = _read_int(dev / "mem_info_vram_total")
        used = _read_int(dev / "mem_info_vram_used")
        unified = vendor == "intel" or total < 1024 * MIB  # an APU's carve-out is small
        name = f"{vendor.upper() if vendor == 'amd' else 'Intel'} GPU {_read(dev / 'device')}".strip()
        gpus.append(_gpu(name, total, max(total - used, 0), unified, "os"))
    return gpus


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _read_int(path: Path) -> int:
    text = _read(path)
    return int(text) if text.isascii() and text.isdigit() else 0


def apple_unified_gpu(chip: str, ram_total: int, ram_available: int) -> GpuInfo:
    """Apple silicon's GPU when the build has no Metal: memory is the system's.

    Metal lets one process keep about 2/3 of RAM resident on machines up to 36 GB and
    about 3/4 above (``recommendedMaxWorkingSetSize``, what ggml-metal reports as total).
    """
    share = 2 / 3 if ram_total <= 36 * (1 << 30) else 3 / 4
    total = int(ram_total * share)
    return _gpu(chip or "Apple GPU", total, min(total, ram_available), True, "os")


def machine_gpus(devices: list[GgmlDevice], os_name: str, arch: str, cpu_model: str,
                 ram_total: int, ram_available: int) -> list[GpuInfo]:
    """The machine's GPUs: ggml's when it has any, else what NVML, nvidia-smi and the OS show."""
    usable = gpus_from_ggml(devices)
    remote = [g for g in usable if g.remote]
    if len(usable) > len(remote):
        return usable
    found = _nvml_gpus()
    if found is None:
        found = _nvidia_smi_gpus()
    if os_name == "Darwin" and arch == "arm64":
        found.append(apple_unified_gpu(cpu_model, ram_total, ram_available))
    elif os_name == "Linux":
        found += scan_drm()
    return remote + found
