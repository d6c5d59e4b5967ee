"""What a machine has, as data: the probe's result, also built from recorded data in tests.

This module imports nothing of llama.cpp, so planning from a ``HardwareInfo`` (for example
one received over the API, or recorded from another machine) does not load it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runtime.hardware.backend import BackendStatus
from runtime.hardware.cpu import CpuInfo
from runtime.hardware.gpus import GpuInfo

if TYPE_CHECKING:
    from runtime.backends.ggml_devices import BuildInfo, GgmlDevice
    from runtime.backends.rpc_endpoint import RpcState


@dataclass(slots=True)
class RamInfo:
    total: int
    available: int

    def to_dict(self) -> dict:
        return {"total": self.total, "available": self.available}


@dataclass(slots=True)
class HardwareInfo:
    os: str  #: platform.system(): Linux | Darwin | Windows
    os_release: str
    cpu: CpuInfo
    ram: RamInfo
    gpus: list[GpuInfo]
    backend: BackendStatus
    devices: list[GgmlDevice] = field(default_factory=list)
    build: BuildInfo | None = None
    #: host RAM copy bandwidth, bytes/s (None: not measured yet)
    memory_bandwidth: float | None = None
    #: fraction of the bandwidth CPU decoding reads at, measured here (None: not calibrated)
    decode_efficiency: float | None = None
    #: fixed seconds of a CPU decode step, measured with the efficiency (0 with one point)
    decode_fixed_s: float = 0.0
    fingerprint: dict = field(default_factory=dict)
    #: the ggml RPC workers asked for, each with its state; the ready ones' devices are in ``gpus``
    rpc: list[RpcState] = field(default_factory=list)

    @property
    def usable_gpus(self) -> list[GpuInfo]:
        return [g for g in self.gpus if g.usable]

    def to_dict(self) -> dict:
        return {
            "os": {"name": self.os, "release": self.os_release},
            "cpu": self.cpu.to_dict(),
            "ram": self.ram.to_dict(),
            "gpus": [g.to_dict() for g in self.gpus],
            "backend": self.backend.to_dict(),
            "devices": [d.to_dict() for d in self.devices],
            "build": self.build.to_dict() if self.build else None,
            "memory_bandwidth_bytes_per_s": self.memory_bandwidth,
            "decode_efficiency": self.decode_efficiency,
            "decode_fixed_s": self.decode_fixed_s,
            "rpc": [s.to_dict() for s in self.rpc],
        }
