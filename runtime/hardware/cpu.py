"""The CPU: model name, cores, and the SIMD features that matter to llama.cpp.

Linux reads ``/proc/cpuinfo``; macOS asks ``sysctl``; elsewhere only the platform module and
what llama.cpp itself reports are available. The parsers take text so they can be checked
against recorded output of machines other than this one.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field

#: /proc/cpuinfo flag -> the name shown to users. x86 first, then ARM ("Features:").
_LINUX_FLAGS = {
    "avx": "AVX", "avx2": "AVX2", "fma": "FMA", "f16c": "F16C",
    "avx512f": "AVX-512", "avx512_vnni": "AVX-512 VNNI", "avx512_bf16": "AVX-512 BF16",
    "avx_vnni": "AVX-VNNI", "amx_tile": "AMX (advertised)",
    "asimd": "NEON", "asimddp": "DOTPROD", "i8mm": "I8MM", "sve": "SVE", "sve2": "SVE2",
}
#: macOS sysctl hw.optional.* -> name (Apple silicon)
_MAC_ARM_KEYS = {
    "hw.optional.neon": "NEON", "hw.optional.arm.FEAT_DotProd": "DOTPROD",
    "hw.optional.arm.FEAT_I8MM": "I8MM", "hw.optional.arm.FEAT_BF16": "BF16",
    "hw.optional.arm.FEAT_SME": "SME",
}
#: macOS Intel: machdep.cpu.features / leaf7_features words -> name
_MAC_X86_WORDS = {"AVX1.0": "AVX", "AVX2": "AVX2", "FMA": "FMA", "F16C": "F16C", "AVX512F": "AVX-512"}


@dataclass(slots=True)
class CpuInfo:
    model: str
    arch: str  #: x86_64 | arm64 | ...
    physical_cores: int
    logical_cores: int
    features: list[str] = field(default_factory=list)  #: what the CPU advertises
    llama_features: list[str] = field(default_factory=list)  #: what llama.cpp reports using

    def to_dict(self) -> dict:
        return {
            "model": self.model, "arch": self.arch,
            "physical_cores": self.physical_cores, "logical_cores": self.logical_cores,
            "features": list(self.features), "llama_features": list(self.llama_features),
        }


def parse_proc_cpuinfo(text: str) -> tuple[str, list[str]]:
    """Model name and features from Linux ``/proc/cpuinfo`` text (x86 or ARM)."""
    model = ""
    flags: set[str] = set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if key in ("model name", "hardware", "processor") and not model and not value.strip().isdigit():
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    features = [name for flag, name in _LINUX_FLAGS.items() if flag in flags]
    return model, features


def parse_sysctl(text: str) -> tuple[str, list[str]]:
    """Model name and features from ``sysctl -a``-style ``key: value`` lines (macOS)."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            values[key.strip()] = value.strip()
    model = values.get("machdep.cpu.brand_string", "")
    features = [name for key, name in _MAC_ARM_KEYS.items() if values.get(key) == "1"]
    words = (values.get("machdep.cpu.features", "") + " " + values.get("machdep.cpu.leaf7_features", "")).split()
    features += [name for word, name in _MAC_X86_WORDS.items() if word in words]
    return model, features


def _read_sysctl() -> str:
    keys = ["machdep.cpu.brand_string", "machdep.cpu.features", "machdep.cpu.leaf7_features",
            *_MAC_ARM_KEYS]
    lines = []
    for key in keys:
        try:
            out = subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0:
            lines.append(f"{key}: {out.stdout.strip()}")
    return "\n".join(lines)


def _model_and_features() -> tuple[str, list[str]]:
    if sys.platform.startswith("linux"):
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                return parse_proc_cpuinfo(f.read())
        except OSError:
            pass
    elif sys.platform == "darwin":
        return parse_sysctl(_read_sysctl())
    return platform.processor() or platform.machine(), []


def cpu_info(llama_features: list[str] | None = None) -> CpuInfo:
    """Describe this machine's CPU; ``llama_features`` come from llama.cpp's system info."""
    import psutil

    model, features = _model_and_features()
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    return CpuInfo(
        model=model or platform.machine(),
        arch=platform.machine(),
        physical_cores=psutil.cpu_count(logical=False) or logical,
        logical_cores=logical,
        features=features,
        llama_features=list(llama_features or []),
    )
