"""A full disk, for real: a small tmpfs mounted for the test (root only; skipped elsewhere).

Free space is counted once for all downloads in progress; ENOSPC mid-download ends the
download ``failed`` with the reason and keeps the partial file, which resumes once space is
freed; a download list that cannot be written (its disk full) never leaves a waiter hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from runtime.store.downloads import DownloadManager, NotEnoughSpace
from runtime.store.fetch import RetryPolicy
from tests.store.hubfiles import FILE, REPO, publish

FAST = RetryPolicy(attempts=2, backoff_s=0.05)


@contextlib.contextmanager
def small_disk(path: Path, size: str):
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({r.stderr.strip() or r.returncode}): needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk`` with one file."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as f:
        with contextlib.suppress(OSError):
            os.posix_fallocate(f.fileno(), 0, os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize)
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)
    return filler


async def _until(cond, timeout: float = 30.0) -> None:
    end = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < end, "condition not reached"
        await asyncio.sleep(0.02)


async def test_free_space_is_counted_across_concurrent_downloads(loopback_hub, tmp_path):
    publish(loopback_hub, tmp_path)  # about 4.5 MB
    publish(loopback_hub, tmp_path, repo="hearth-test/Other-GGUF")
    with small_disk(tmp_path / "disk", "8m") as disk:
        m = DownloadManager(tmp_path / "downloads.json", cache_root=disk, reserve_bytes=0, retry=FAST)
        await m.start()
        try:
            loopback_hub.hold_after(REPO, FILE, 64 << 10)
            first = await m.pull(f"{REPO}:Q4_K_M")
            await _until(lambda: first.done_bytes > 0)
            with pytest.raises(NotEnoughSpace, match="promised to the downloads in progress"):
                await m.pull("hearth-test/Other-GGUF:Q4_K_M")  # 4.5 + 4.5 MB do not fit in 8
            loopback_hub.release()
            assert (await asyncio.wait_for(m.wait(first.id), 30)).state == "completed"
        finally:
            loopback_hub.release()
            await m.close()


async def test_enospc_fails_the_download_with_the_reason_and_keeps_it_resumable(loopback_hub, tmp_path):
    data = publish(loopback_hub, tmp_path)
    with small_disk(tmp_path / "disk", "8m") as disk:
        m = DownloadManager(tmp_path / "downloads.json", cache_root=disk, reserve_bytes=0, retry=FAST)
        await m.start()
        try:
            loopback_hub.hold_after(REPO, FILE, 1 << 20)
            d = await m.pull(f"{REPO}:Q4_K_M")
            await _until(lambda: d.done_bytes >= 1 << 20)
            filler = fill(disk)  # the disk fills up under the download
            loopback_hub.release()
            d = await asyncio.wait_for(m.wait(d.id), 30)
            assert d.state == "failed" and "disk is full" in d.error, d.error
            partial = next(disk.rglob("*.incomplete"))
            assert partial.stat().st_size >= 1 << 20  # kept: the download resumes from it
            filler.unlink()
            d = await asyncio.wait_for(m.wait(m.resume(d.id).id), 30)
            assert d.state == "completed", d.error
            assert hashlib.sha256(Path(d.path).read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()
            assert loopback_hub.ranges(REPO, FILE)[-1] is not None  # resumed with a Range, not from zero
        finally:
            loopback_hub.release()
            await m.close()


async def test_a_download_list_that_cannot_be_written_does_not_hang_a_waiter(loopback_hub, tmp_path):
    data = publish(loopback_hub, tmp_path)
    with small_disk(tmp_path / "state", "1m") as state_disk:
        m = DownloadManager(state_disk / "downloads.json", cache_root=tmp_path / "cache", retry=FAST)
        await m.start()
        try:
            loopback_hub.hold_after(REPO, FILE, 64 << 10)
            d = await m.pull(f"{REPO}:Q4_K_M")
            await _until(lambda: d.done_bytes > 0)
            fill(state_disk)  # from now on downloads.json cannot be written
            loopback_hub.release()
            d = await asyncio.wait_for(m.wait(d.id), 30)  # what /api/pull with "stream": false awaits
            assert d.state == "completed" and Path(d.path).read_bytes() == data
        finally:
            loopback_hub.release()
            await m.close()
