"""Recorded machines this project cannot run on: device lists as ggml and nvidia-smi report them.

Written as data, not behaviour: what ``ggml_backend_dev_*`` returns on a CUDA or Metal build
(the figures ``llama-bench --list-devices`` prints as "CUDA0: NVIDIA GeForce RTX 4090 (24564
MiB, 23592 MiB free)"), what ``nvidia-smi --query-gpu=name,memory.total,memory.free
--format=csv,noheader,nounits`` prints, and the text of ``/proc/cpuinfo`` and ``sysctl``.
"""

from __future__ import annotations

from runtime.backends.ggml_devices import GgmlDevice
from runtime.hardware.backend import backend_status
from runtime.hardware.cpu import CpuInfo
from runtime.hardware.gpus import GpuInfo, gpus_from_ggml
from runtime.hardware.info import HardwareInfo, RamInfo

MIB = 1 << 20
GIB = 1 << 30


def cuda(index: int, description: str, total_mib: int, free_mib: int) -> GgmlDevice:
    return GgmlDevice(index, f"CUDA{index}", description, "gpu", "CUDA", total_mib * MIB, free_mib * MIB)


def cpu_device(description: str, ram: int) -> GgmlDevice:
    return GgmlDevice(0, "CPU", description, "cpu", "CPU", ram, ram)


H100 = cuda(0, "NVIDIA H100 80GB HBM3", 81559, 81008)
RTX_4090 = cuda(0, "NVIDIA GeForce RTX 4090", 24564, 23592)
RTX_3060 = cuda(0, "NVIDIA GeForce RTX 3060", 12288, 11909)
RTX_4060 = cuda(0, "NVIDIA GeForce RTX 4060", 8188, 7800)
GTX_1650 = cuda(0, "NVIDIA GeForce GTX 1650", 4096, 3911)
MX250 = cuda(0, "NVIDIA GeForce MX250", 2048, 1990)
#: Apple M2, 16 GB: ggml-metal reports recommendedMaxWorkingSetSize (11453.25 MB) as total
M2_METAL = GgmlDevice(0, "MTL0", "Apple M2", "gpu", "MTL", 11453251584, 11453251584)

NVIDIA_SMI = "NVIDIA H100 80GB HBM3, 81559, 81008\nNVIDIA GeForce RTX 4090, 24564, 23592\n"

PROC_CPUINFO_GRAVITON3 = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs paca pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd40
CPU revision\t: 1
"""

SYSCTL_M2 = """machdep.cpu.brand_string: Apple M2
hw.optional.neon: 1
hw.optional.arm.FEAT_DotProd: 1
hw.optional.arm.FEAT_I8MM: 1
hw.optional.arm.FEAT_BF16: 1
hw.optional.arm.FEAT_SME: 0
"""


def machine(devices: list[GgmlDevice], ram_total: int, ram_available: int, os_name: str = "Linux",
            arch: str = "x86_64", cpu_model: str = "AMD Ryzen 9 7950X 16-Core Processor",
            extra_gpus: list[GpuInfo] | None = None, bandwidth: float = 60e9) -> HardwareInfo:
    """A HardwareInfo as probe() would build it on that machine."""
    gpus = gpus_from_ggml(devices) + list(extra_gpus or [])
    compiled = sorted({d.backend for d in devices})
    return HardwareInfo(
        os=os_name, os_release="recorded",
        cpu=CpuInfo(cpu_model, arch, 8, 16, ["AVX2"]),
        ram=RamInfo(ram_total, ram_available), gpus=gpus,
        backend=backend_status(compiled, any(d.kind != "cpu" for d in devices), gpus, os_name, arch),
        devices=[cpu_device(cpu_model, ram_total), *devices], memory_bandwidth=bandwidth,
    )


# Several GPUs in one machine, as ggml lists them (one CUDA device per GPU, in PCI order) and as
# nvidia-smi prints them.
RTX_4090_B = cuda(1, "NVIDIA GeForce RTX 4090", 24564, 23592)
RTX_4060_B = cuda(1, "NVIDIA GeForce RTX 4060", 8188, 7800)
TWO_4090 = [RTX_4090, RTX_4090_B]
A_4090_AND_A_4060 = [RTX_4090, RTX_4060_B]
FOUR_H100 = [cuda(i, "NVIDIA H100 80GB HBM3", 81559, 81008) for i in range(4)]
#: a GPU another program has filled (a desktop session's, a training job's)
RTX_3060_FULL = cuda(0, "NVIDIA GeForce RTX 3060", 12288, 310)
NVIDIA_SMI_FOUR_H100 = "".join("NVIDIA H100 80GB HBM3, 81559, 81008\n" for _ in range(4))
NVIDIA_SMI_4090_4060 = "NVIDIA GeForce RTX 4090, 24564, 23592\nNVIDIA GeForce RTX 4060, 8188, 7800\n"
