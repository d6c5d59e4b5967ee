"""The probe on this machine (real ggml devices, real RAM, real bandwidth) and its parsers on
recorded output of other machines."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

import psutil
import pytest

from runtime.backends import ggml_devices
from runtime.hardware import bandwidth as bw
from runtime.hardware.cpu import parse_proc_cpuinfo, parse_sysctl
from runtime.hardware.gpus import apple_unified_gpu, gpus_from_ggml, parse_nvidia_smi, scan_drm
from runtime.hardware.probe import probe
from runtime.hardware.report import format_probe_report
from tests.hardware import recorded as rec

MIB, GIB = 1 << 20, 1 << 30
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/cpuinfo")


def _cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def test_ggml_lists_the_cpu_device_with_system_memory():
    devices = ggml_devices.list_devices()
    cpus = [d for d in devices if d.kind == "cpu"]
    assert len(cpus) == 1 and cpus[0].name == "CPU" and cpus[0].backend == "CPU"
    assert cpus[0].memory_total == pytest.approx(psutil.virtual_memory().total, rel=0.02)
    info = ggml_devices.build_info()
    assert "CPU" in info.backends
    has_gpu_device = any(d.kind in ("gpu", "igpu") for d in devices)
    assert info.gpu_offload == has_gpu_device


@linux_only
def test_llama_reports_the_simd_the_cpu_has():
    flags = _cpu_flags()
    features = ggml_devices.system_info_features(ggml_devices.build_info().system_info)
    if platform.machine() == "x86_64":
        assert ("AVX2" in features) == ("avx2" in flags)
        assert ("AVX512" in features) == ("avx512f" in flags)


def test_system_info_parser():
    text = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 0 | AVX512 = 1 | OPENMP = 1 |"
    assert ggml_devices.system_info_features(text) == ["SSE3", "AVX", "AVX512", "OPENMP"]


def test_probe_describes_this_machine(data_dir):
    info = probe()
    d = info.to_dict()
    for key in ("cpu", "ram", "gpus", "backend"):
        assert key in d
    assert d["ram"]["total"] == psutil.virtual_memory().total
    assert 0 < d["ram"]["available"] <= d["ram"]["total"]
    assert d["cpu"]["logical_cores"] == psutil.cpu_count(logical=True)
    assert d["cpu"]["physical_cores"] == psutil.cpu_count(logical=False)
    assert "CPU" in d["backend"]["compiled"]
    usable = [g for g in info.gpus if g.usable]
    assert d["backend"]["active"] == ("CPU" if not usable else d["backend"]["active"])
    assert info.memory_bandwidth and info.memory_bandwidth > 1e9  # any machine copies > 1 GB/s
    if sys.platform.startswith("linux") and platform.machine() == "x86_64":
        assert ("AVX2" in info.cpu.features) == ("avx2" in _cpu_flags())
    text = format_probe_report(info)
    assert "RAM" in text and info.cpu.model in text and "GB/s" in text


def test_bandwidth_is_measured_once_per_machine(data_dir):
    info = probe()
    cache = bw.cache_path()
    first = json.loads(cache.read_text())
    assert first["machine"] == info.fingerprint and first["bandwidth"]["bytes_per_s"] > 0
    again = probe()
    assert json.loads(cache.read_text())["bandwidth"] == first["bandwidth"]
    assert again.memory_bandwidth == first["bandwidth"]["bytes_per_s"]
    # The file of another machine (a different CPU) is not trusted: measured again.
    first["machine"] = {**first["machine"], "cpu": "some other CPU"}
    first["bandwidth"]["bytes_per_s"] = 1.0
    cache.write_text(json.dumps(first))
    remeasured = probe()
    assert remeasured.memory_bandwidth > 1e9
    assert json.loads(cache.read_text())["machine"] == info.fingerprint


def test_measure_bandwidth_reads_and_writes():
    value = bw.measure_bandwidth(32 * MIB, threads=2, repeats=3)
    assert 1e9 < value < 1e13


def test_arm_cpuinfo():
    model, features = parse_proc_cpuinfo(rec.PROC_CPUINFO_GRAVITON3)
    assert {"NEON", "DOTPROD", "SVE", "I8MM"} <= set(features)
    assert "AVX2" not in features


def test_x86_cpuinfo():
    text = "processor\t: 0\nmodel name\t: AMD Ryzen 9 7950X 16-Core Processor\nflags\t\t: fpu avx avx2 fma f16c avx512f\n"
    model, features = parse_proc_cpuinfo(text)
    assert model == "AMD Ryzen 9 7950X 16-Core Processor"
    assert features == ["AVX", "AVX2", "FMA", "F16C", "AVX-512"]


def test_macos_sysctl():
    model, features = parse_sysctl(rec.SYSCTL_M2)
    assert model == "Apple M2"
    assert features == ["NEON", "DOTPROD", "I8MM", "BF16"]


def test_nvidia_smi_csv():
    gpus = parse_nvidia_smi(rec.NVIDIA_SMI + "garbage line\n")
    assert [g.name for g in gpus] == ["NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090"]
    assert gpus[0].memory_total == 81559 * MIB and gpus[0].memory_free == 81008 * MIB
    assert gpus[0].bandwidth == 3350e9 and gpus[1].bandwidth == 1008e9
    assert not any(g.usable for g in gpus) and {g.vendor for g in gpus} == {"nvidia"}


def test_ggml_gpu_devices():
    (metal,) = gpus_from_ggml([rec.cpu_device("Apple M2", 16 * GIB), rec.M2_METAL])
    assert metal.usable and metal.unified and metal.vendor == "apple" and metal.device == "MTL0"
    (cuda,) = gpus_from_ggml([rec.RTX_3060])
    assert cuda.usable and not cuda.unified and cuda.memory_total == 12288 * MIB


def test_apple_gpu_without_metal():
    gpu = apple_unified_gpu("Apple M2", 16 * GIB, 9 * GIB)
    assert gpu.memory_total == int(16 * GIB * 2 / 3) and gpu.memory_free == 9 * GIB
    assert gpu.unified and not gpu.usable and gpu.bandwidth == 100e9


def test_drm_scan(tmp_path):
    amd = tmp_path / "card0" / "device"
    amd.mkdir(parents=True)
    (amd / "vendor").write_text("0x1002\n")
    (amd / "device").write_text("0x744c\n")
    (amd / "mem_info_vram_total").write_text(str(24 * GIB))
    (amd / "mem_info_vram_used").write_text(str(1 * GIB))
    nvidia = tmp_path / "card1" / "device"
    nvidia.mkdir(parents=True)
    (nvidia / "vendor").write_text("0x10de\n")
    (tmp_path / "card0-DP-1").mkdir()
    (gpu,) = scan_drm(tmp_path)
    assert (gpu.vendor, gpu.memory_total, gpu.memory_free) == ("amd", 24 * GIB, 23 * GIB)
    assert not gpu.unified and not gpu.usable


def test_probe_in_a_subprocess_leaves_this_process_alone(data_dir):
    import subprocess

    code = ("import sys; from runtime.hardware.probe import probe_in_subprocess\n"
            "info = probe_in_subprocess()\n"
            "assert 'llama_cpp' not in sys.modules, 'llama.cpp was loaded here'\n"
            "print(info.ram.total, len(info.devices), info.memory_bandwidth > 0)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    total, devices, measured = out.stdout.split()
    assert int(total) == psutil.virtual_memory().total and int(devices) >= 1 and measured == "True"
