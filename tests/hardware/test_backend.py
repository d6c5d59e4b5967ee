"""The installed build against the machine's GPUs, and the command that fixes a mismatch."""

from __future__ import annotations

from runtime.hardware.backend import backend_status, install_command
from runtime.hardware.gpus import apple_unified_gpu, gpus_from_ggml, parse_nvidia_smi
from runtime.hardware.report import format_probe_report
from tests.hardware import recorded as rec

GIB = 1 << 30
PIP = "pip install --force-reinstall --no-cache-dir llama-cpp-python"


def test_cpu_build_on_an_nvidia_machine_names_the_cuda_build():
    gpus = parse_nvidia_smi(rec.NVIDIA_SMI)
    status = backend_status(["CPU"], False, gpus, "Linux", "x86_64")
    assert status.active == "CPU" and status.suggested == "cuda"
    assert status.install_command == f'CMAKE_ARGS="-DGGML_CUDA=on -DGGML_RPC=on" {PIP}'
    # the largest GPU is the one named
    assert "NVIDIA H100 80GB HBM3" in status.message and status.install_command in status.message


def test_cpu_build_on_apple_silicon_names_metal():
    gpu = apple_unified_gpu("Apple M2", 16 * GIB, 9 * GIB)
    status = backend_status(["CPU"], False, [gpu], "Darwin", "arm64")
    assert status.suggested == "metal"
    assert status.install_command == f'CMAKE_ARGS="-DGGML_METAL=on -DGGML_RPC=on" {PIP}'


def test_cpu_build_with_an_amd_gpu_names_vulkan():
    from runtime.hardware.gpus import GpuInfo

    amd = GpuInfo("AMD GPU 0x744c", "amd", 24 * GIB, 23 * GIB, False, "os")
    status = backend_status(["CPU"], False, [amd], "Linux", "x86_64")
    assert status.suggested == "vulkan" and "-DGGML_VULKAN=on" in status.install_command


def test_windows_uses_powershell_syntax():
    assert install_command("cuda", "Windows") == f'$env:CMAKE_ARGS="-DGGML_CUDA=on -DGGML_RPC=on"; {PIP}'


def test_a_gpu_build_in_use_needs_no_advice():
    status = backend_status(["CUDA", "CPU"], True, gpus_from_ggml([rec.RTX_4090]), "Linux", "x86_64")
    assert status.active == "CUDA" and status.message is None and status.install_command is None
    metal = backend_status(["MTL", "CPU"], True, gpus_from_ggml([rec.M2_METAL]), "Darwin", "arm64")
    assert metal.active == "Metal" and metal.message is None


def test_no_gpu_no_advice():
    status = backend_status(["CPU"], False, [], "Linux", "x86_64")
    assert (status.active, status.suggested, status.message) == ("CPU", None, None)


def test_probe_report_shows_the_advice():
    hw = rec.machine([], 64 * GIB, 60 * GIB, extra_gpus=parse_nvidia_smi(rec.NVIDIA_SMI))
    text = format_probe_report(hw)
    assert "not usable by this build" in text and "-DGGML_CUDA=on" in text
    cuda = rec.machine([rec.RTX_4090], 64 * GIB, 60 * GIB)
    text = format_probe_report(cuda)
    assert "used by llama.cpp as CUDA0" in text and "CMAKE_ARGS" not in text
