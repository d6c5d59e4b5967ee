"""The disk tier of the prefix cache: saved states and checkpoints that outlive the worker.

Coding agents re-send 10-40k tokens of tools and instructions with every request. The
host tier (``host_cache.py``) keeps their prefix while the model stays loaded; this tier
keeps it across a restart of the service, a switch to another model and back, and an
unload by keep-alive. Every entry the host tier saves is also handed here, bytes and all,
and a writer thread puts it in a file, so the step loop never waits for the disk. A
lookup the host tier cannot serve reads the file back (on the step loop: a 44 MiB
SmolLM2 state of 2,000 tokens reads and checks in tens of ms against seconds to
recompute it).

Files live in one owner-only folder (``prompt-cache/`` in the data directory, 0700, files
0600) shared by every model, bounded by ``capacity_bytes`` over the whole folder, least
recently used out first (a hit touches the file's mtime), in two ranks as in the host tier:
shared prefixes (a state or checkpoint where two prompts part, an agent's tools and
instructions: named ``p-`` and ``pc<blocks>-``) go after the others while they keep within
``SHARED_SHARE`` of the budget, so other directories' sessions do not push out the prefix
every session of the first one needs. A block is indexed to every state that holds it (a
worker's index is rebuilt from the files at its start, in no particular order, and another
model's writer may remove a file at any time: the prefix a removed state shared with others
stays found), and a lookup reads the smallest. A file is named and headed by
a *layout key*: a hash of the model file's identity (size and sampled chunks:
``model_identity``) and of the cache layout (block size, KV type, flash attention,
``swa_full``, the llama.cpp build), so a model never reads another's cells. The context
size is not part of it: a saved sequence is a list of cells, valid in any context that
has room for it (llama.cpp refuses one that does not fit, which is a miss), and the
planner may give a model a different context after a restart.

A file is trusted only whole: a header with a magic, a format version, the layout key,
the entry's block hashes (and a state's prompt length in blocks, or a checkpoint's length)
and a CRC-32 of all of it and the payload. Anything that does
not match (truncated, damaged, written by another format) is removed, never loaded.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import shutil
import struct
import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from runtime.engine.host_cache import SHARED_SHARE, TierCounters, TierStats, hit_rate

log = logging.getLogger("hearth")

MAGIC = b"HEARTHKV"
FORMAT_VERSION = 1
SUFFIX = ".kv"
#: magic, format version, kind (0 state, 1 checkpoint), blocks (a checkpoint's; a state's
#: prompt blocks, 0 where not known), hash count, payload bytes, layout key, CRC-32 of the rest
#: of the header, the hashes and the payload
_HEAD = struct.Struct("<8sIB3xIIQ32sI")
_STATE, _CHECKPOINT = 0, 1
#: bytes handed to the writer and not yet on disk, beyond which new entries are not written
MAX_PENDING_BYTES = 1 << 30
#: a temporary file this old was left by a writer that died
STALE_TMP_S = 3600.0
#: the model file's identity: its size and this many chunks of this size, spread over it
_SAMPLES, _SAMPLE_BYTES = 16, 64 << 10


def model_identity(path: str | Path) -> bytes:
    """A cheap, stable identity of a model file: BLAKE2b of its size, its first MiB (the GGUF
    header and metadata) and ``_SAMPLES`` chunks spread over the rest (about 2 MiB read,
    milliseconds, at every load; a whole 200 MB file would take about a second)."""
    size = os.path.getsize(path)
    h = hashlib.blake2b(size.to_bytes(8, "little"), digest_size=32)
    with open(path, "rb") as f:
        h.update(f.read(1 << 20))
        for i in range(_SAMPLES):
            f.seek(size * i // _SAMPLES)
            h.update(f.read(_SAMPLE_BYTES))
        f.seek(max(0, size - _SAMPLE_BYTES))
        h.update(f.read(_SAMPLE_BYTES))
    return h.digest()


def layout_key(identity: bytes, block_size: int, kv_type: str, flash_attn: bool | None, build: str,
               swa_full: bool = False) -> bytes:
    """What a saved state's bytes depend on: the model and the cache layout (module docstring)."""
    layout = (f"format={FORMAT_VERSION};block={block_size};kv={kv_type};flash={flash_attn};"
              f"swa_full={int(swa_full)};build={build}")
    return hashlib.blake2b(identity + layout.encode(), digest_size=32).digest()


def disk_capacity(requested: int, folder: Path) -> int:
    """``requested`` bytes, but never more than what the folder holds now plus half the free
    space of its disk (a nearly full disk is not filled by a cache)."""
    if requested <= 0:
        return 0
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return 0
    held = sum(size for _, size, _ in _files(folder))
    return min(requested, held + free // 2)


@dataclass(slots=True, eq=False)
class DiskEntry:
    path: Path
    hashes: list[int]  # a state's block hashes; a checkpoint's last block hash only
    blocks: int  # a checkpoint's prefix length in blocks; 0 for a state
    size: int  # bytes of the file
    #: the bytes while the writer has not written them yet
    pending: bytes | None = None
    #: a state's blocks that its prompt filled before its last token (0: not known)
    prompt_blocks: int = 0
    #: a shared prefix (``p-`` files): evicted after the others, within its share
    shared: bool = False

    @property
    def head_blocks(self) -> int:
        """The header's blocks field."""
        return self.blocks or self.prompt_blocks


class DiskCache:
    """The disk tier of one loaded model (one layout key); the folder may hold others'."""

    def __init__(self, folder: Path, capacity_bytes: int, layout: bytes) -> None:
        from runtime.private_files import private_dir

        self.folder = private_dir(folder)
        self.capacity_bytes = capacity_bytes
        self.layout = layout
        self._prefix = layout[:8].hex()
        #: block hash -> (blocks up to it, every state holding it)
        self._index: dict[int, tuple[int, list[DiskEntry]]] = {}
        self._states: dict[int, DiskEntry] = {}  # last hash -> state
        self._checkpoints: dict[tuple[int, int], DiskEntry] = {}  # (last hash, blocks) -> checkpoint
        self._by_path: dict[Path, DiskEntry] = {}
        self._held = {False: TierCounters(), True: TierCounters()}  # entries and bytes: states, checkpoints
        self.state_lookups = TierCounters()
        self.checkpoint_lookups = TierCounters()
        self.writes_skipped = 0
        self._lock = threading.Lock()
        self._pending_bytes = 0
        self._gone: deque[Path] = deque()  # files the writer removed or could not write
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._scan()
        self._writer = threading.Thread(target=self._write_loop, name="hearth-prompt-cache", daemon=True)
        self._writer.start()

    # -- the index ----------------------------------------------------------------------
    def _scan(self) -> None:
        """Index this layout's files (their headers only); remove broken and stale ones."""
        now = time.time()
        for entry in os.scandir(self.folder):
            path = Path(entry.path)
            if ".tmp" in entry.name:
                try:
                    if now - entry.stat().st_mtime > STALE_TMP_S:
                        _unlink(path)
                except OSError:
                    pass
                continue
            if not entry.name.startswith(self._prefix) or not entry.name.endswith(SUFFIX):
                continue
            try:
                with open(path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    head = self._read_head(f, size)
            except OSError:
                continue
            if head is None:
                self._remove(path, "its header does not match its size or this model")
                continue
            kind, hashes, _, blocks = head
            ckpt = kind == _CHECKPOINT
            self._add(DiskEntry(path, hashes, blocks if ckpt else 0, size, prompt_blocks=0 if ckpt else blocks,
                                shared=_shared_name(entry.name)))

    def _read_head(self, f, size: int) -> tuple[int, list[int], int, int] | None:
        """(kind, hashes, payload bytes, blocks) of a file of this layout whose real ``size``
        is what its header says, None when it is not one. The header's counts are checked
        against ``size`` before anything they count is read: a damaged count must not make the
        worker allocate gigabytes at start."""
        raw = f.read(_HEAD.size)
        if len(raw) != _HEAD.size:
            return None
        magic, version, kind, blocks, n, payload, layout, _ = _HEAD.unpack(raw)
        if magic != MAGIC or version != FORMAT_VERSION or layout != self.layout or kind not in (_STATE, _CHECKPOINT):
            return None
        if n == 0 or (kind == _CHECKPOINT and (n != 1 or blocks < 1)) or (kind == _STATE and blocks > n):
            return None
        if size != _HEAD.size + 8 * n + payload:
            return None
        packed = f.read(8 * n)
        if len(packed) != 8 * n:
            return None
        return kind, list(struct.unpack(f"<{n}Q", packed)), payload, blocks

    def _add(self, entry: DiskEntry) -> None:
        key = (entry.hashes[-1], entry.blocks)
        same = self._checkpoints.get(key) if entry.blocks else self._states.get(entry.hashes[-1])
        if same is not None:  # the same entry twice (a shared copy of a single prompt's)
            if same.shared and not entry.shared:
                self._queue.put(("delete", entry.path))
                return
            self._drop(same)
        self._by_path[entry.path] = entry
        held = self._held[entry.blocks > 0]
        held.entries += 1
        held.bytes += entry.size
        if entry.blocks:
            self._checkpoints[key] = entry
            return
        for i, h in enumerate(entry.hashes):
            self._index.setdefault(h, (i + 1, []))[1].append(entry)
            old = self._states.get(h)
            if old is not None and (entry.shared or not old.shared):
                self._drop(old)  # covered whole by the new state: its file only takes room
        self._states[entry.hashes[-1]] = entry

    def _drop(self, entry: DiskEntry) -> None:
        self._forget(entry)
        self._queue.put(("delete", entry.path))

    def _forget(self, entry: DiskEntry) -> None:
        if self._by_path.get(entry.path) is entry:
            del self._by_path[entry.path]
            held = self._held[entry.blocks > 0]
            held.entries -= 1
            held.bytes -= entry.size
        if entry.blocks:
            if self._checkpoints.get((entry.hashes[0], entry.blocks)) is entry:
                del self._checkpoints[(entry.hashes[0], entry.blocks)]
            return
        if self._states.get(entry.hashes[-1]) is entry:
            del self._states[entry.hashes[-1]]
        for h in entry.hashes:
            holders = self._holders(h)
            if entry in holders:
                holders.remove(entry)
                if not holders:
                    del self._index[h]

    def _holders(self, block_hash: int) -> list[DiskEntry]:
        found = self._index.get(block_hash)
        return found[1] if found is not None else []

    def _drain_gone(self) -> None:
        while self._gone:
            entry = self._by_path.get(self._gone.popleft())
            if entry is not None:
                self._forget(entry)

    # -- saving (the step loop hands bytes over; the writer thread writes them) ------------
    def put_state(self, hashes: list[int], data: bytes, prompt_blocks: int = 0, shared: bool = False) -> None:
        """Write a saved state of the blocks ``hashes`` (see ``HostCache.put``)."""
        self._drain_gone()
        if self.has_shared_state(hashes) or (not shared and self.reach(hashes) == len(hashes)):
            return  # already on disk, maybe inside a longer state
        name = f"{'p' if shared else 's'}-{hashes[-1]:016x}"
        self._put(DiskEntry(self._path(name), list(hashes), 0, 0, prompt_blocks=prompt_blocks, shared=shared),
                  _STATE, data)

    def put_checkpoint(self, block_hash: int, blocks: int, data: bytes, shared: bool = False) -> bool:
        """Write a checkpoint (in the background); False when it is not kept (larger than the
        tier, or too much is waiting to be written)."""
        self._drain_gone()
        if self.has_checkpoint(block_hash, blocks, shared):
            return True
        name = f"{'pc' if shared else 'c'}{blocks}-{block_hash:016x}"
        return self._put(DiskEntry(self._path(name), [block_hash], blocks, 0, shared=shared), _CHECKPOINT, data)

    def _path(self, name: str) -> Path:
        return self.folder / f"{self._prefix}-{name}{SUFFIX}"

    def _put(self, entry: DiskEntry, kind: int, data: bytes) -> bool:
        entry.size = _HEAD.size + 8 * len(entry.hashes) + len(data)
        if entry.size > self.capacity_bytes:
            return False
        with self._lock:
            if self._pending_bytes + len(data) > MAX_PENDING_BYTES:
                self.writes_skipped += 1
                return False
            self._pending_bytes += len(data)
        entry.pending = data
        self._add(entry)
        self._queue.put(("write", entry, kind))
        return True

    def _write_loop(self) -> None:
        while True:
            op = self._queue.get()
            if op is None:
                return
            if op[0] == "delete":
                _unlink(op[1])
                continue
            _, entry, kind = op
            data = entry.pending
            try:
                self._write(entry, kind, data)
            except OSError as e:  # a full or read-only disk: the entry is not kept
                log.warning("the prompt cache could not write %s: %s", entry.path.name, e)
                self._gone.append(entry.path)
            finally:
                entry.pending = None
                with self._lock:
                    self._pending_bytes -= len(data)
            self._evict(keep=entry.path)

    def _write(self, entry: DiskEntry, kind: int, data: bytes) -> None:
        packed = struct.pack(f"<{len(entry.hashes)}Q", *entry.hashes)
        head = _HEAD.pack(MAGIC, FORMAT_VERSION, kind, entry.head_blocks, len(entry.hashes), len(data), self.layout,
                          0)
        crc = zlib.crc32(data, zlib.crc32(packed, zlib.crc32(head[:-4])))
        tmp = entry.path.with_name(f"{entry.path.name}.tmp-{os.getpid()}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with open(fd, "wb") as f:
                f.write(head[:-4] + struct.pack("<I", crc))
                f.write(packed)
                f.write(data)
            os.replace(tmp, entry.path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise

    def _evict(self, keep: Path) -> None:
        """Remove files of the folder (any model's) beyond the budget: shared prefixes beyond
        their share, then the others, then shared prefixes, least recently used first in each."""
        files = sorted(_files(self.folder))
        total = sum(size for _, size, _ in files)
        if total <= self.capacity_bytes:
            return
        shared = [f for f in files if _shared_name(f[2].name)]
        over, held = [], sum(size for _, size, _ in shared)
        for f in shared:
            if held <= self.capacity_bytes * SHARED_SHARE:
                break
            over.append(f)
            held -= f[1]
        rest = [f for f in shared if f not in over]
        for _, size, path in [*over, *(f for f in files if not _shared_name(f[2].name)), *rest]:
            if total <= self.capacity_bytes:
                return
            if path == keep or not _unlink(path):
                continue
            total -= size
            self._gone.append(path)

    # -- reading ----------------------------------------------------------------------
    def longest(self, hashes: list[int], longer_than: int = 0) -> tuple[DiskEntry, bytes, int] | None:
        """The smallest saved state of those covering the most leading blocks of ``hashes``, if
        more than ``longer_than``: its entry, its bytes (read and checked: a file that fails the
        check is removed, and the next best is tried) and how many of ``hashes`` it covers."""
        while (n := self.reach(hashes, longer_than)) > longer_than:
            for best in sorted(self._holders(hashes[n - 1]), key=lambda e: e.size):
                data = self._read(best, _STATE)
                if data is not None:
                    return best, data, n
        return None

    def reach(self, hashes: list[int], longer_than: int = 0) -> int:
        """How many leading blocks of ``hashes`` a state on disk covers, when more than
        ``longer_than`` (else ``longer_than``); nothing is read."""
        self._drain_gone()
        for n in range(len(hashes), longer_than, -1):
            if hashes[n - 1] in self._index:
                return n
        return longer_than

    def has_checkpoint(self, block_hash: int, blocks: int, shared: bool = False) -> bool:
        """Whether that checkpoint is on disk (``shared``: as a shared prefix)."""
        self._drain_gone()
        entry = self._checkpoints.get((block_hash, blocks))
        return entry is not None and (entry.shared or not shared)

    def has_shared_state(self, hashes: list[int]) -> bool:
        """Whether a shared prefix state of exactly the blocks ``hashes`` is on disk."""
        self._drain_gone()
        entry = self._states.get(hashes[-1])
        return entry is not None and entry.shared and len(entry.hashes) == len(hashes)

    def parts(self, hashes: list[int], n: int) -> bool:
        """Whether a state on disk holds the first ``n`` blocks of ``hashes`` and its prompt went
        on past them (``HostCache.parts``)."""
        return any(e.prompt_blocks > n for e in self._holders(hashes[n - 1]))

    def read_checkpoint(self, block_hash: int, blocks: int) -> bytes | None:
        entry = self._checkpoints.get((block_hash, blocks))
        return self._read(entry, _CHECKPOINT) if entry is not None else None

    def _read(self, entry: DiskEntry, kind: int) -> bytes | None:
        data = entry.pending
        if data is not None:
            return data
        try:
            with open(entry.path, "rb") as f:
                data = self._checked(f, entry, kind)
            if data is not None:
                os.utime(entry.path)  # the most recently used
        except OSError:  # removed meanwhile (another model's writer made room)
            self._forget(entry)
            return None
        if data is None:
            self._forget(entry)
            self._remove(entry.path, "it is damaged or not this model's")
        return data

    def _checked(self, f, entry: DiskEntry, kind: int) -> bytes | None:
        """The payload of ``f`` when everything in it matches ``entry`` and its checksum."""
        raw = f.read(_HEAD.size)
        if len(raw) != _HEAD.size:
            return None
        magic, version, k, blocks, n, size, layout, crc = _HEAD.unpack(raw)
        if (magic, version, k, layout, blocks, n) != (MAGIC, FORMAT_VERSION, kind, self.layout, entry.head_blocks,
                                                       len(entry.hashes)):
            return None
        # the file may have been replaced since the index was read: its size is checked again
        # before the header's payload length is trusted
        if os.fstat(f.fileno()).st_size != _HEAD.size + 8 * n + size:
            return None
        packed = f.read(8 * n)
        data = f.read(size)
        if len(data) != size or f.read(1) or list(struct.unpack(f"<{n}Q", packed)) != entry.hashes:
            return None
        if zlib.crc32(data, zlib.crc32(packed, zlib.crc32(raw[:-4]))) != crc:
            return None
        return data

    def _remove(self, path: Path, why: str) -> None:
        log.warning("prompt cache file %s removed: %s", path.name, why)
        _unlink(path)

    # -- the rest -----------------------------------------------------------------------
    def stats(self) -> TierStats:
        self._drain_gone()
        states, ckpts = (TierCounters(held.entries, held.bytes, seen.hits, seen.misses, seen.hit_tokens)
                         for held, seen in ((self._held[False], self.state_lookups),
                                            (self._held[True], self.checkpoint_lookups)))
        return TierStats(self.capacity_bytes, states, ckpts, hit_rate(states, ckpts), self.writes_skipped)

    def close(self, timeout: float = 5.0) -> None:
        """Finish the writes handed over (for at most ``timeout`` seconds) and stop the writer."""
        self._queue.put(None)
        self._writer.join(timeout)


def _shared_name(name: str) -> bool:
    """Whether a cache file's name is a shared prefix's (``<layout>-p-...``, ``<layout>-pc<n>-...``)."""
    return name.partition("-")[2].startswith("p")


def _files(folder: Path) -> list[tuple[float, int, Path]]:
    """(mtime, size, path) of every cache file in the folder."""
    out = []
    try:
        for entry in os.scandir(folder):
            if entry.name.endswith(SUFFIX):
                try:
                    st = entry.stat()
                except OSError:
                    continue
                out.append((st.st_mtime, st.st_size, Path(entry.path)))
    except OSError:
        pass
    return out


def _unlink(path: Path) -> bool:
    """Remove a file; False when it could not be (in use elsewhere on Windows)."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        return False
    return True
