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


def _longest(disk: DiskCache, hashes: list[int], longer_than: int = 0) -> tuple[list[int], bytes, int] | None:
    """``DiskCache.longest`` as (the state's hashes, its bytes, blocks covered), or None."""
    read = disk.longest(hashes, longer_than)
    return None if read is None else (read[0].hashes, read[1], read[2])


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
        assert _longest(disk, [1, 2, 3, 4]) == ([1, 2, 3], b"state" * 100, 3)
        assert _longest(disk, [1, 2, 9]) == ([1, 2, 3], b"state" * 100, 2)  # it serves any prefix of it
        assert _longest(disk, [1, 2, 3], longer_than=3) is None and _longest(disk, [7]) is None
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
        assert _longest(other, [1, 2]) is None and other.stats().states.entries == 0
        other.put_state([1, 2], b"theirs")
    finally:
        other.close()
    mine = DiskCache(tmp_path, 1 << 20, LAYOUT)
    try:
        assert _longest(mine, [1, 2]) == ([1, 2], b"mine", 2) and len(_files(tmp_path)) == 2
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
        assert _longest(disk, [1]) is None and _longest(disk, [2]) is None and _longest(disk, [4]) is None
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
        assert _longest(disk, [1, 2]) is None and not disk.has_checkpoint(3, 1)
        assert _longest(disk, [7]) == ([7], b"b" * 100, 1)
    finally:
        disk.close()


def test_a_file_replaced_after_the_index_was_read_is_checked_against_its_size_again(tmp_path):
    disk = DiskCache(tmp_path, 1 << 20, LAYOUT)
    disk.put_state([1], b"a" * 100)
    disk = _reopen(disk)
    try:
        path = tmp_path / f"{LAYOUT[:8].hex()}-s-{1:016x}.kv"
        _set_u32(path, PAYLOAD_AT + 4, 0xFFFFFFF0)  # the payload length's high half: 2**64 - ... bytes
        assert _longest(disk, [1]) is None and _files(tmp_path) == []
    finally:
        disk.close()


def test_the_folder_keeps_its_budget_least_recently_used_first(tmp_path):
    size = 10_000
    disk = DiskCache(tmp_path, 3 * size + 1000, LAYOUT)
    for h in (1, 2, 3):
        disk.put_state([h], bytes(size))
        disk = _reopen(disk)  # one write at a time, so the mtimes differ
        time.sleep(0.02)
    assert _longest(disk, [1]) is not None  # a hit makes 1 the most recently used
    time.sleep(0.02)
    disk.put_state([4], bytes(size))
    disk = _reopen(disk)
    try:
        assert _longest(disk, [2]) is None  # the least recently used went
        assert all(_longest(disk, [h]) is not None for h in (1, 3, 4))
        assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= disk.capacity_bytes
        disk.put_state([5], bytes(4 * size))  # larger than the whole budget: not written
        assert _longest(disk, [5]) is None
    finally:
        disk.close()


def test_a_state_covered_by_a_newer_one_leaves_the_disk(tmp_path):
    disk = DiskCache(tmp_path, 1 << 20, LAYOUT)
    disk.put_state([1, 2], b"turn one")
    disk.put_state([1, 2, 3], b"turn two")
    disk = _reopen(disk)
    try:
        assert len(_files(tmp_path)) == 1 and _longest(disk, [1, 2]) == ([1, 2, 3], b"turn two", 2)
    finally:
        disk.close()


def test_entries_waiting_for_the_writer_are_served_from_memory(tmp_path):
    disk = DiskCache(tmp_path, 1 << 20, LAYOUT)
    try:
        disk.put_state([1, 2], b"fresh")
        assert _longest(disk, [1, 2]) == ([1, 2], b"fresh", 2)  # written or not, the same bytes
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


def test_a_prefix_two_states_share_stays_found_whichever_of_them_goes(tmp_path):
    """A new worker indexes the files in the folder's order, and another model's writer may
    remove one of them meanwhile: the shared blocks pointed at one file only, so a third
    session of the agent found nothing when that one was gone, though the other held them."""
    for gone in (10, 20):
        folder = tmp_path / f"without-{gone}"
        disk = DiskCache(folder, 1 << 20, LAYOUT)
        disk.put_state([1, 2, 3, 10], b"first" * 20, prompt_blocks=4)
        disk.put_state([1, 2, 3, 20], b"second" * 20, prompt_blocks=4)
        disk = _reopen(disk)
        try:
            next(folder.glob(f"*-s-{gone:016x}.kv")).unlink()  # another model's writer made room
            kept = 30 - gone
            assert _longest(disk, [1, 2, 3, 30]) == ([1, 2, 3, kept], (b"first" if kept == 10 else b"second") * 20, 3)
            assert disk.parts([1, 2, 3, 30], 3) and disk.reach([1, 2, 3, 30]) == 3
        finally:
            disk.close()


def test_shared_prefixes_and_prompt_lengths_outlive_the_worker(tmp_path):
    disk = DiskCache(tmp_path, 1 << 20, LAYOUT)
    disk.put_state([1, 2, 3, 4], b"session" * 20, prompt_blocks=3)
    disk.put_state([1, 2], b"tools" * 10, prompt_blocks=2, shared=True)  # inside the other: written all the same
    disk.put_checkpoint(2, 2, b"window")
    disk.put_checkpoint(2, 2, b"window", shared=True)  # the same checkpoint turns out to be shared
    disk = _reopen(disk)
    try:
        assert sorted(name.split("-", 1)[1] for name in _files(tmp_path)) == [
            f"p-{2:016x}.kv", f"pc2-{2:016x}.kv", f"s-{4:016x}.kv"]
        assert disk.has_shared_state([1, 2]) and not disk.has_shared_state([1, 2, 3, 4])
        assert disk.has_checkpoint(2, 2, shared=True)
        assert _longest(disk, [1, 2, 9]) == ([1, 2], b"tools" * 10, 2)  # the smallest that serves
        assert disk.parts([1, 2, 9, 9], 2) and not disk.parts([1, 2, 3, 4, 5], 4)
        disk.put_state([1, 2, 3, 4, 5], b"next turn" * 20, prompt_blocks=4)  # covers the session, not the prefix
    finally:
        disk.close()
    assert sorted(name.split("-", 1)[1] for name in _files(tmp_path)) == [
        f"p-{2:016x}.kv", f"pc2-{2:016x}.kv", f"s-{5:016x}.kv"]


def test_shared_prefixes_leave_the_folder_last_within_their_share(tmp_path):
    size = 10_000
    disk = DiskCache(tmp_path, 5 * size + 2000, LAYOUT)
    disk.put_state([1], bytes(size), shared=True)  # the oldest file
    disk = _reopen(disk)
    for h in (2, 3, 4, 5):
        time.sleep(0.02)  # one write at a time, so the mtimes differ
        disk.put_state([h], bytes(size))
        disk = _reopen(disk)
    time.sleep(0.02)
    disk.put_state([6], bytes(size))  # a single conversation's oldest state goes, not the older shared one
    disk = _reopen(disk)
    assert [h for h in range(1, 7) if _longest(disk, [h]) is not None] == [1, 3, 4, 5, 6]
    for h in (7, 8, 9):  # 7: within the share (3 goes); 8, 9: beyond it, the oldest shared go (1, 7)
        time.sleep(0.02)
        disk.put_state([h], bytes(size), shared=True)
        disk = _reopen(disk)
    try:
        assert [h for h in range(1, 10) if _longest(disk, [h]) is not None] == [4, 5, 6, 8, 9]
        assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= disk.capacity_bytes
    finally:
        disk.close()
