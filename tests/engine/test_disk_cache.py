"""The prompt cache's disk tier without a model: files, checks, the budget, the layout key."""

from __future__ import annotations

import os
import stat
import time

from runtime.engine.disk_cache import DiskCache, disk_capacity, layout_key, model_identity
from runtime.engine.host_cache import HostCache

LAYOUT = bytes(range(32))
OTHER = bytes(range(1, 33))


def _files(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _reopen(disk: DiskCache, layout: bytes = LAYOUT, capacity: int | None = None) -> DiskCache:
    """The same folder as a new worker sees it: the writes finished, the index read again."""
    disk.close()
    return DiskCache(disk.folder, capacity or disk.capacity_bytes, layout)


def test_entries_outlive_the_worker_in_owner_only_files(tmp_path):
    disk = DiskCache(tmp_path / "prompt-cache", 1 << 20, LAYOUT)
    disk.put_state([1, 2, 3], b"state" * 100)
    disk.put_checkpoint(2, 2, b"partial")
    disk = _reopen(disk)
    try:
        assert disk.longest([1, 2, 3, 4]) == ([1, 2, 3], b"state" * 100, 3)
        assert disk.longest([1, 2, 9]) == ([1, 2, 3], b"state" * 100, 2)  # it serves any prefix of it
        assert disk.longest([1, 2, 3], longer_than=3) is None and disk.longest([7]) is None
        assert disk.has_checkpoint(2, 2) and not disk.has_checkpoint(2, 3)
        assert disk.read_checkpoint(2, 2) == b"partial"
        s = disk.stats()
        assert (s.states.entries, s.checkpoints.entries) == (1, 1) and s.states.bytes > 500
    finally:
        disk.close()
    folder = tmp_path / "prompt-cache"
    if os.name == "posix":
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert {stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()} == {0o600}
    assert len(_files(folder)) == 2


def test_another_models_files_are_neither_read_nor_removed(tmp_path):
    disk = DiskCache(tmp_path, 1 << 20, LAYOUT)
    disk.put_state([1, 2], b"mine")
    other = _reopen(disk, OTHER)
    try:
        assert other.longest([1, 2]) is None and other.stats().states.entries == 0
        other.put_state([1, 2], b"theirs")
    finally:
        other.close()
    mine = DiskCache(tmp_path, 1 << 20, LAYOUT)
    try:
        assert mine.longest([1, 2]) == ([1, 2], b"mine", 2) and len(_files(tmp_path)) == 2
    finally:
        mine.close()


def _corrupt(path, offset_from_end: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[-offset_from_end] ^= 0xFF
    path.write_bytes(bytes(raw))


def test_a_damaged_truncated_or_foreign_file_is_removed_never_loaded(tmp_path):
    disk = DiskCache(tmp_path, 1 << 20, LAYOUT)
    disk.put_state([1], b"a" * 1000)
    disk.put_state([2], b"b" * 1000)
    disk.put_checkpoint(3, 1, b"c" * 1000)
    disk.close()
    prefix = LAYOUT[:8].hex()
    damaged = tmp_path / f"{prefix}-s-{1:016x}.kv"
    truncated = tmp_path / f"{prefix}-s-{2:016x}.kv"
    checkpoint = tmp_path / f"{prefix}-c1-{3:016x}.kv"
    stranger = tmp_path / f"{prefix}-s-{4:016x}.kv"
    _corrupt(damaged, 10)  # one flipped byte of the payload: only the checksum sees it
    _corrupt(checkpoint, 1)
    truncated.write_bytes(truncated.read_bytes()[:-1])
    stranger.write_bytes(b"not a cache file")
    disk = DiskCache(tmp_path, 1 << 20, LAYOUT)
    try:
        # the truncated file and the stranger go at once: their headers do not add up
        assert _files(tmp_path) == sorted([damaged.name, checkpoint.name])
        assert disk.longest([1]) is None and disk.longest([2]) is None and disk.longest([4]) is None
        assert disk.has_checkpoint(3, 1) and disk.read_checkpoint(3, 1) is None
        assert not disk.has_checkpoint(3, 1)
        assert _files(tmp_path) == []  # a damaged file goes as soon as it is read
    finally:
        disk.close()


def _set_u32(path, offset: int, value: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset:offset + 4] = value.to_bytes(4, "little")
    path.write_bytes(bytes(raw))


#: where the header keeps the count of block hashes and the payload length (``disk_cache._HEAD``)
COUNT_AT, PAYLOAD_AT = 20, 24


def test_a_damaged_count_is_checked_against_the_files_size_before_anything_is_read(tmp_path):
    """A count of 0xFFFFFFF0 hashes asked a new worker to read 32 GiB: it died with MemoryError
    at every start, and the file stayed. Now the file is removed and the others still serve."""
    disk = DiskCache(tmp_path, 1 << 20, LAYOUT)
    disk.put_state([1, 2], b"a" * 100)
    disk.put_state([7], b"b" * 100)
    disk.put_checkpoint(3, 1, b"c" * 100)
    disk.close()
    prefix = LAYOUT[:8].hex()
    state, checkpoint = tmp_path / f"{prefix}-s-{2:016x}.kv", tmp_path / f"{prefix}-c1-{3:016x}.kv"
    _set_u32(state, COUNT_AT, 0xFFFFFFF0)
    _set_u32(checkpoint, PAYLOAD_AT, 0xFFFFFFF0)
    disk = DiskCache(tmp_path, 1 << 20, LAYOUT)
    try:
        assert _files(tmp_path) == [f"{prefix}-s-{7:016x}.kv"]
        assert disk.longest([1, 2]) is None and not disk.has_checkpoint(3, 1)
        assert disk.longest([7]) == ([7], b"b" * 100, 1)
    finally:
        disk.close()


def test_a_file_replaced_after_the_index_was_read_is_checked_against_its_size_again(tmp_path):
    disk = DiskCache(tmp_path, 1 << 20, LAYOUT)
    disk.put_state([1], b"a" * 100)
    disk = _reopen(disk)
    try:
        path = tmp_path / f"{LAYOUT[:8].hex()}-s-{1:016x}.kv"
        _set_u32(path, PAYLOAD_AT + 4, 0xFFFFFFF0)  # the payload length's high half: 2**64 - ... bytes
        assert disk.longest([1]) is None and _files(tmp_path) == []
    finally:
        disk.close()


def test_the_folder_keeps_its_budget_least_recently_used_first(tmp_path):
    size = 10_000
    disk = DiskCache(tmp_path, 3 * size + 1000, LAYOUT)
    for h in (1, 2, 3):
        disk.put_state([h], bytes(size))
        disk = _reopen(disk)  # one write at a time, so the mtimes differ
        time.sleep(0.02)
    assert disk.longest([1]) is not None  # a hit makes 1 the most recently used
    time.sleep(0.02)
    disk.put_state([4], bytes(size))
    disk = _reopen(disk)
    try:
        assert disk.longest([2]) is None  # the least recently used went
        assert all(disk.longest([h]) is not None for h in (1, 3, 4))
        assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= disk.capacity_bytes
        disk.put_state([5], bytes(4 * size))  # larger than the whole budget: not written
        assert disk.longest([5]) is None
    finally:
        disk.close()


def test_a_state_covered_by_a_newer_one_leaves_the_disk(tmp_path):
    disk = DiskCache(tmp_path, 1 << 20, LAYOUT)
    disk.put_state([1, 2], b"turn one")
    disk.put_state([1, 2, 3], b"turn two")
    disk = _reopen(disk)
    try:
        assert len(_files(tmp_path)) == 1 and disk.longest([1, 2]) == ([1, 2, 3], b"turn two", 2)
    finally:
        disk.close()


def test_entries_waiting_for_the_writer_are_served_from_memory(tmp_path):
    disk = DiskCache(tmp_path, 1 << 20, LAYOUT)
    try:
        disk.put_state([1, 2], b"fresh")
        assert disk.longest([1, 2]) == ([1, 2], b"fresh", 2)  # written or not, the same bytes
    finally:
        disk.close()


def test_the_host_tier_reads_back_what_memory_lost(tmp_path):
    disk = DiskCache(tmp_path, 1 << 20, LAYOUT)
    host = HostCache(100, disk)
    host.put([1, 2], bytes(80))
    host.put([5, 6], bytes(80))  # memory keeps one state; the disk keeps both
    host.put_checkpoint(2, 2, bytes(10))
    disk = _reopen(disk)
    host = HostCache(100, disk)  # a new worker: memory is empty
    try:
        entry, n = host.longest([1, 9])  # a prefix of the saved state
        assert n == 1 and entry.from_disk and entry.hashes == [1, 2] and entry.data == bytes(80)
        assert host.has([1, 2])  # kept in memory for the next request
        again, n = host.longest([1, 2, 3])
        assert n == 2 and not again.from_disk
        ckpt = host.checkpoint([1, 2, 3], 3)
        assert ckpt.blocks == 2 and ckpt.from_disk and host.num_checkpoints == 1
        assert host.longest([5, 6])[1] == 2
    finally:
        disk.close()


def test_the_model_identity_and_the_layout_key(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(os.urandom(8 << 20))
    ident = model_identity(model)
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(model.read_bytes())
    assert model_identity(copy) == ident  # the same bytes elsewhere: the same model
    raw = bytearray(model.read_bytes())
    raw[100] ^= 1  # the header
    model.write_bytes(bytes(raw))
    assert model_identity(model) != ident
    key = layout_key(ident, 16, "f16", None, "llama-cpp-python 1")
    assert key == layout_key(ident, 16, "f16", None, "llama-cpp-python 1")
    assert len({key, layout_key(ident, 32, "f16", None, "llama-cpp-python 1"),
                layout_key(ident, 16, "q8_0", None, "llama-cpp-python 1"),
                layout_key(ident, 16, "f16", False, "llama-cpp-python 1"),
                layout_key(ident, 16, "f16", None, "llama-cpp-python 2")}) == 5


def test_the_budget_never_takes_more_than_half_the_free_space(tmp_path):
    import shutil

    free = shutil.disk_usage(tmp_path).free
    assert disk_capacity(0, tmp_path) == 0
    assert disk_capacity(1 << 20, tmp_path) == min(1 << 20, free // 2)
    assert disk_capacity(1 << 62, tmp_path) == free // 2
