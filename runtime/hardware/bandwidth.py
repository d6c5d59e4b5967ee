"""Host memory bandwidth, measured once per machine and kept in the data directory.

Decoding one token reads every weight once, so RAM bandwidth bounds CPU decode speed. The
measure is a numpy copy of a large array split across one thread per physical core (numpy
releases the GIL while copying), best of a few runs; a copy reads and writes, so the bytes
moved are twice the array. It takes about a second, so the result is cached in
``hardware.json`` next to the decode calibration (see ``runtime.hardware.calibrate``) and
measured again only when the machine's fingerprint (CPU model, cores, RAM) changes.
"""

from __future__ import annotations

import json
import platform
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CACHE_NAME = "hardware.json"
CACHE_VERSION = 1
DEFAULT_ARRAY_BYTES = 256 << 20


def cache_path() -> Path:
    from runtime.config import data_dir

    return data_dir() / CACHE_NAME


def machine_fingerprint(cpu_model: str, logical_cores: int, ram_total: int) -> dict:
    """What identifies this machine for the cache: a new CPU or RAM size means measure again."""
    return {
        "cpu": cpu_model, "logical_cores": logical_cores,
        # RAM rounded to GiB: the total moves by a few MiB between boots on some systems.
        "ram_gib": round(ram_total / (1 << 30)), "system": platform.system(),
    }


def load_cache(fingerprint: dict) -> dict:
    """The cached measures for this machine, or {} when missing, unreadable or for another machine."""
    try:
        data = json.loads(cache_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return {}
    return data if data.get("machine") == fingerprint else {}


def update_cache(fingerprint: dict, **entries: dict | None) -> dict:
    """Merge ``entries`` into this machine's cache file (written atomically) and return it."""
    data = load_cache(fingerprint) or {"version": CACHE_VERSION, "machine": fingerprint}
    data.update(entries)
    from runtime.private_files import write_private

    write_private(cache_path(), json.dumps(data, indent=2))  # atomic and owner-only, like every file there
    return data


def measure_bandwidth(array_bytes: int = DEFAULT_ARRAY_BYTES, threads: int = 1, repeats: int = 5) -> float:
    """Copy bandwidth in bytes/s (read + write), best of ``repeats`` copies of ``array_bytes``."""
    import numpy as np  # here: a cached measure costs the service no numpy

    n = max(array_bytes // 8, 1024)
    src = np.ones(n, dtype=np.float64)  # ones, not empty: the pages must exist before timing
    dst = np.zeros_like(src)
    threads = max(1, threads)
    bounds = np.linspace(0, n, threads + 1, dtype=np.int64)
    chunks = [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]

    def copy(chunk: tuple[int, int]) -> None:
        a, b = chunk
        np.copyto(dst[a:b], src[a:b])

    best = float("inf")
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for _ in range(repeats):
            t0 = time.perf_counter()
            list(pool.map(copy, chunks))
            best = min(best, time.perf_counter() - t0)
    return 2 * src.nbytes / best


def cached_bandwidth(fingerprint: dict, threads: int, ram_available: int, measure: bool = True,
                     force: bool = False) -> float | None:
    """This machine's bandwidth from the cache, measuring and storing it the first time.

    Returns None when it is not cached and ``measure`` is False. ``force`` measures again
    (a first measure on a busy machine reads low) and drops the decode calibration, which
    was made against the old value.
    """
    entry = load_cache(fingerprint).get("bandwidth")
    if not force and isinstance(entry, dict) and entry.get("bytes_per_s", 0) > 0:
        return float(entry["bytes_per_s"])
    if not measure:
        return None
    # Two arrays are allocated: keep them well inside the free RAM of a small machine.
    size = int(min(DEFAULT_ARRAY_BYTES, max(ram_available // 16, 16 << 20)))
    value = measure_bandwidth(size, threads)
    update_cache(fingerprint, decode=None, bandwidth={
        "bytes_per_s": value, "array_bytes": size, "threads": threads,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    })
    return value
