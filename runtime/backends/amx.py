"""Intel AMX, which some machines advertise and then trap on.

llama.cpp built with -march=native on a CPU that lists AMX puts the weights of Q4_0, Q8_0 and
the K-quants in an AMX buffer and runs ``tilezero`` on them; under some hypervisors the CPU
advertises AMX and the kernel grants it, yet the instruction traps (SIGILL, seen on this
project's build machines: the whole process dies). The AMX buffer is one of llama.cpp's "extra
buffer types" (with weight repacking), so every model this process loads gets them switched off
there: ``LlamaBackend`` sets ``use_extra_bufts`` itself, and ``keep_extra_buffers_off`` makes
llama.cpp's default model parameters say the same to every other loader (``llama_cpp.Llama``,
as the GGUF embedder uses).
"""

from __future__ import annotations

import threading
from functools import cache

import llama_cpp as lc
import llama_cpp.llama_cpp as bindings

_lock = threading.Lock()


@cache
def amx_advertised() -> bool:
    """Whether the CPU advertises Intel AMX (Linux: /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return any(line.startswith("flags") and " amx_tile" in line for line in f)
    except OSError:
        return False


def keep_extra_buffers_off() -> bool:
    """Where AMX is advertised, llama.cpp's default model parameters (as the bindings module and
    the package both name them) come with ``use_extra_bufts`` off, for every loader in this
    process. Idempotent and safe under concurrent first use; whether it applies."""
    if not amx_advertised():
        return False
    with _lock:
        original = bindings.llama_model_default_params
        if getattr(original, "_extra_buffers_off", False):
            return True

        def without_extra_buffers() -> bindings.llama_model_params:
            params = original()
            params.use_extra_bufts = False
            return params

        without_extra_buffers._extra_buffers_off = True  # type: ignore[attr-defined]
        bindings.llama_model_default_params = without_extra_buffers
        lc.llama_model_default_params = without_extra_buffers
    return True
