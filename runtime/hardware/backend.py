"""Which backends the installed llama-cpp-python has, against what this machine could use.

The PyPI wheel of llama-cpp-python is built from source on install and, without CMAKE_ARGS,
only for the CPU. A machine with an NVIDIA GPU, Apple silicon, or an AMD / Intel GPU then
runs every model on the CPU; this module says so and gives the command that builds the
right backend.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.hardware.gpus import GpuInfo, is_metal

_PIP = "pip install --force-reinstall --no-cache-dir llama-cpp-python"
_FLAGS = {"cuda": "-DGGML_CUDA=on", "metal": "-DGGML_METAL=on", "vulkan": "-DGGML_VULKAN=on"}
_NEEDS = {
    "cuda": "it needs the CUDA toolkit (nvcc)",
    "metal": "it needs the Xcode command line tools",
    "vulkan": "it needs the Vulkan SDK (glslc)",
}
_LABEL = {"cuda": "CUDA", "metal": "Metal", "vulkan": "Vulkan"}


@dataclass(slots=True)
class BackendStatus:
    compiled: list[str]  #: ggml registries of this build, e.g. ["CPU"], ["CUDA", "CPU"]
    gpu_offload: bool  #: llama_supports_gpu_offload()
    active: str  #: where layers can go: "CPU" or the GPU backend(s), e.g. "CUDA"
    suggested: str | None = None  #: cuda | metal | vulkan: a build that would use an idle GPU
    install_command: str | None = None
    message: str | None = None

    def to_dict(self) -> dict:
        return {
            "compiled": list(self.compiled), "gpu_offload": self.gpu_offload,
            "active": self.active, "suggested": self.suggested,
            "install_command": self.install_command, "message": self.message,
        }


def install_command(kind: str, os_name: str = "Linux") -> str:
    """The pip command that rebuilds llama-cpp-python with ``kind`` (cuda, metal, vulkan)."""
    flag = f"{_FLAGS[kind]} -DGGML_RPC=on"  # keep ggml's RPC backend (hearth rpc-worker, serve --rpc)
    if os_name == "Windows":  # PowerShell sets environment variables differently
        return f'$env:CMAKE_ARGS="{flag}"; {_PIP}'
    return f'CMAKE_ARGS="{flag}" {_PIP}'


def suggested_backend(gpu: GpuInfo, os_name: str, arch: str) -> str:
    """The backend that would run on ``gpu``: CUDA for NVIDIA, Metal on Apple silicon, else Vulkan."""
    if gpu.vendor == "nvidia":
        return "cuda"
    if gpu.vendor == "apple" or (os_name == "Darwin" and arch == "arm64"):
        return "metal"
    return "vulkan"


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GB"


def backend_status(compiled: list[str], gpu_offload: bool, gpus: list[GpuInfo],
                   os_name: str, arch: str) -> BackendStatus:
    """Compare the build's backends with the machine's GPUs; explain how to use an idle GPU."""
    gpu_backends = sorted({g.backend for g in gpus if g.usable and g.backend})
    active = ", ".join("Metal" if is_metal(b) else b for b in gpu_backends) or "CPU"
    status = BackendStatus(list(compiled), gpu_offload, active)
    idle = [g for g in gpus if not g.usable]
    if any(g.usable and not g.remote for g in gpus) or not idle:  # RPC workers' devices are not this GPU
        return status
    gpu = max(idle, key=lambda g: g.memory_total)
    kind = suggested_backend(gpu, os_name, arch)
    command = install_command(kind, os_name)
    status.suggested, status.install_command = kind, command
    status.message = (
        f"This machine has {gpu.name} ({_gib(gpu.memory_total)}), but the installed "
        f"llama-cpp-python was built for the CPU only, so models will not use the GPU. "
        f"To use it, rebuild llama-cpp-python with {_LABEL[kind]} ({_NEEDS[kind]}; the build "
        f"takes several minutes):\n  {command}"
    )
    return status
