"""ggml's backend devices, read through ctypes from llama-cpp-python's own ggml library.

llama-cpp-python binds ``llama_*`` but not the ``ggml_backend_dev_*`` functions that say which
devices (CPU, CUDA0, Metal, Vulkan0, ...) this build can run on and how much memory each has.
They are bound here on the very ``libggml`` that ``libllama`` loaded, so the device list is
the one llama.cpp will use when it loads a model.

Device type ids follow ``enum ggml_backend_dev_type`` in ggml-backend.h (CPU, GPU, IGPU,
ACCEL, META = 0..4). Older ggml had CPU, GPU, ACCEL = 0..2; this build is new enough to
have the META device (libggml-base exports ``ggml_backend_meta_*``).

``llama_cpp`` is imported on first use, not with this module: the dataclasses travel between
processes (a probe run in a child process) without loading llama.cpp where they arrive.
"""

from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

#: ggml-backend.h: enum ggml_backend_dev_type
DEVICE_TYPES = {0: "cpu", 1: "gpu", 2: "igpu", 3: "accel", 4: "meta"}

_c_size_p = ctypes.POINTER(ctypes.c_size_t)
_SIGNATURES: dict[str, tuple[list, object]] = {
    "ggml_backend_dev_count": ([], ctypes.c_size_t),
    "ggml_backend_dev_get": ([ctypes.c_size_t], ctypes.c_void_p),
    "ggml_backend_dev_name": ([ctypes.c_void_p], ctypes.c_char_p),
    "ggml_backend_dev_description": ([ctypes.c_void_p], ctypes.c_char_p),
    "ggml_backend_dev_memory": ([ctypes.c_void_p, _c_size_p, _c_size_p], None),
    "ggml_backend_dev_type": ([ctypes.c_void_p], ctypes.c_int),
    "ggml_backend_dev_backend_reg": ([ctypes.c_void_p], ctypes.c_void_p),
    "ggml_backend_reg_count": ([], ctypes.c_size_t),
    "ggml_backend_reg_get": ([ctypes.c_size_t], ctypes.c_void_p),
    "ggml_backend_reg_name": ([ctypes.c_void_p], ctypes.c_char_p),
    "ggml_backend_load_all_from_path": ([ctypes.c_char_p], None),
    "ggml_backend_register": ([ctypes.c_void_p], None),
    "ggml_backend_dev_by_name": ([ctypes.c_char_p], ctypes.c_void_p),
    "ggml_backend_dev_by_type": ([ctypes.c_int], ctypes.c_void_p),
}


class GgmlUnavailable(RuntimeError):
    """llama-cpp-python's ggml library could not be found or lacks the device API."""


@dataclass(slots=True)
class GgmlDevice:
    """One ggml backend device as llama.cpp sees it."""

    index: int
    name: str  #: "CPU", "CUDA0", "MTL0", "Vulkan0"
    description: str  #: "NVIDIA GeForce RTX 4090", "Apple M2"
    kind: str  #: cpu | gpu | igpu | accel | meta
    backend: str  #: the registry that owns it: "CPU", "CUDA", "MTL" / "Metal", "Vulkan", "BLAS"
    memory_total: int
    memory_free: int

    def to_dict(self) -> dict:
        return {
            "index": self.index, "name": self.name, "description": self.description,
            "kind": self.kind, "backend": self.backend,
            "memory_total": self.memory_total, "memory_free": self.memory_free,
        }


@dataclass(slots=True)
class BuildInfo:
    """What this llama-cpp-python build was compiled with."""

    backends: list[str]  #: registry names, e.g. ["CPU"] or ["CUDA", "CPU"]
    #: a GPU of this machine can take layers (llama_supports_gpu_offload() is also true for a CPU
    #: build with the RPC backend, whose devices are other machines': those are left out here)
    gpu_offload: bool
    system_info: str  #: llama_print_system_info(), e.g. "CPU : SSE3 = 1 | AVX2 = 1 | ..."
    library_dir: str
    version: str = "unknown"  #: llama-cpp-python's version

    def to_dict(self) -> dict:
        return {
            "backends": list(self.backends), "gpu_offload": self.gpu_offload,
            "system_info": self.system_info, "library_dir": self.library_dir,
            "version": self.version,
        }


def library_dir() -> Path:
    """The folder holding llama-cpp-python's shared libraries (``llama_cpp/lib``)."""
    import llama_cpp as lc

    return Path(lc.__file__).resolve().parent / "lib"


def _library_file(folder: Path) -> Path:
    if sys.platform == "win32":
        names = ["ggml.dll", "libggml.dll"]
    elif sys.platform == "darwin":
        names = ["libggml.dylib", "libggml.so"]
    else:
        names = ["libggml.so"]
    for name in names:
        if (folder / name).is_file():
            return folder / name
    raise GgmlUnavailable(
        f"no ggml library ({' or '.join(names)}) in {folder}: llama-cpp-python looks broken; "
        "reinstall it (pip install --force-reinstall --no-cache-dir llama-cpp-python)"
    )


def ggml_library() -> ctypes.CDLL:
    """libggml as llama.cpp loaded it, with the device and registry functions typed."""
    return _ggml()


@lru_cache(maxsize=1)
def _ggml() -> ctypes.CDLL:
    """libggml with the device functions typed, backends registered."""
    import llama_cpp as lc

    # Importing llama_cpp already loaded libllama and, with it, this libggml: dlopen hands
    # back the same library, so the registry seen here is the one llama.cpp uses.
    lib = ctypes.CDLL(str(_library_file(library_dir())))
    for name, (args, res) in _SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise GgmlUnavailable(f"the ggml library has no {name}: llama-cpp-python is too old") from None
        fn.argtypes, fn.restype = args, res
    lc.llama_backend_init()
    # A build with dynamically loaded backends (GGML_BACKEND_DL) registers nothing until its
    # backend libraries are loaded; a linked build registers them at start-up.
    if lib.ggml_backend_reg_count() == 0:
        lib.ggml_backend_load_all_from_path(str(library_dir()).encode())
    return lib


def _text(ptr: bytes | None) -> str:
    return ptr.decode("utf-8", errors="replace") if ptr else ""


def list_devices() -> list[GgmlDevice]:
    """Every device ggml registered (the CPU included), with total and free memory."""
    lib = _ggml()
    devices = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        kind = lib.ggml_backend_dev_type(dev)
        reg = lib.ggml_backend_dev_backend_reg(dev)
        devices.append(GgmlDevice(
            index=i,
            name=_text(lib.ggml_backend_dev_name(dev)),
            description=_text(lib.ggml_backend_dev_description(dev)),
            kind=DEVICE_TYPES.get(kind, f"unknown({kind})"),
            backend=_text(lib.ggml_backend_reg_name(reg)) if reg else "",
            memory_total=total.value,
            memory_free=free.value,
        ))
    return devices


def registered_backends() -> list[str]:
    """Names of the backend registries in this build, e.g. ["CPU"] or ["CUDA", "CPU"]."""
    lib = _ggml()
    return [_text(lib.ggml_backend_reg_name(lib.ggml_backend_reg_get(i)))
            for i in range(lib.ggml_backend_reg_count())]


def build_info() -> BuildInfo:
    """Which backends this llama-cpp-python build has, and what llama.cpp says of the CPU."""
    import llama_cpp as lc

    backends = registered_backends()
    return BuildInfo(
        backends=backends,
        gpu_offload=bool(lc.llama_supports_gpu_offload())
        and any(d.kind in ("gpu", "igpu") and d.backend != "RPC" for d in list_devices()),
        system_info=_text(lc.llama_print_system_info()).strip(),
        library_dir=str(library_dir()),
        version=getattr(lc, "__version__", "unknown"),
    )


def system_info_features(system_info: str) -> list[str]:
    """CPU features llama.cpp was built for and found, from llama_print_system_info().

    The text looks like ``CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | ... |``; a feature set to 1
    is listed.
    """
    features = []
    for part in system_info.replace(":", "|").split("|"):
        key, sep, value = part.partition("=")
        if sep and value.strip() == "1":
            features.append(key.strip())
    return features
