"""Fetch one file into the Hugging Face cache: HTTP Range resume, retries, SHA-256 verification.

The bytes go to ``blobs/{etag}.incomplete`` (the name huggingface_hub uses, so either tool
resumes the other's partial file). A retry, a pause, a restarted service or a new
``hearth pull`` after a kill all continue from the partial file's length with
``Range: bytes=N-``. The SHA-256 is computed while the bytes arrive (the partial file is
hashed once when a fetch resumes); only a file whose digest equals the hub's LFS sha256 is
renamed to ``blobs/{etag}``. A file the listing gives no sha256 for is verified against the
``X-Linked-Etag`` the hub sends with it, or else against its git blob id (the SHA-1 of
``blob {size}\0`` and the content). A mismatch deletes the partial file, so nothing
unverified is ever found under the blob's name. A full disk (ENOSPC) ends the fetch with
``DiskFull``; the partial file is kept, so the download resumes once space is freed. A
file that grows past the size the hub listed stops there (``Oversized``): nothing beyond the
listed size is written and the partial file is deleted.

Every fetch is bounded by a size known before its first byte is written: the size the hub
lists, or for a file listed without one, the size the hub announces for it (the download
manager asks with a HEAD: ``X-Linked-Size``, else ``Content-Length``), or failing both, the
size the GET's own headers announce (``Content-Length`` of a 200, the total of a 206's
``Content-Range``), which is reported through ``on_size`` (the manager's free-space check)
before anything is written. A file whose size nobody announces is refused (``UnsizedFile``).
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import aiohttp
from filelock import FileLock, Timeout

from runtime.store.hf_cache import CachedFile

log = logging.getLogger("hearth.store")
FLUSH_BYTES = 1 << 20
RETRYABLE_STATUS = {408, 425, 429, 500, 502, 503, 504}


class FetchError(RuntimeError):
    """The file could not be fetched; the message says why."""


class ChecksumMismatch(FetchError):
    pass


class DiskFull(FetchError):
    """The disk filled up while the file was written; the partial file is kept to resume."""


class Oversized(FetchError):
    """The hub sent more bytes than it listed for the file: nothing of it is kept."""


class UnsizedFile(FetchError):
    """Neither the listing nor the response gives the file's size: it is not downloaded."""


def announced_size(headers, status: int) -> int | None:
    """The size of the whole file that a response's headers announce: ``X-Linked-Size`` (the
    hub's, for an LFS file), else the ``Content-Length`` of a 200, else the total of a 206's
    ``Content-Range``; None when they announce none (or nonsense)."""
    for value in (headers.get("X-Linked-Size"), headers.get("Content-Length") if status == 200 else None):
        if value is not None and value.strip().isascii() and value.strip().isdigit():
            return int(value.strip())
    if status == 206:
        total = headers.get("Content-Range", "").rpartition("/")[2].strip()
        if total.isascii() and total.isdigit():
            return int(total)
    return None


def _linked_sha256(value: str | None) -> str | None:
    """The sha256 in an ``X-Linked-Etag`` header (the hub sends it for LFS files), if it is one."""
    tag = (value or "").strip().removeprefix("W/").strip('"').lower()
    return tag if len(tag) == 64 and all(c in "0123456789abcdef" for c in tag) else None


def git_blob_id(path: Path, hash_name: str = "sha1") -> str:
    """The git blob id of a file's content (what the hub lists as ``blobId`` for a file kept in git)."""
    h = hashlib.new(hash_name)
    h.update(b"blob %d\0" % path.stat().st_size)
    with path.open("rb") as f:
        for block in iter(lambda: f.read(4 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass(slots=True)
class RetryPolicy:
    attempts: int = 6  #: tries in a row that bring no new byte before giving up
    backoff_s: float = 0.5  #: first wait; doubles each failed try
    max_backoff_s: float = 30.0

    def delay(self, failures: int) -> float:
        return min(self.backoff_s * (2 ** (failures - 1)), self.max_backoff_s)


def resolve_url(endpoint: str, repo_id: str, commit: str, filename: str) -> str:
    return f"{endpoint}/{repo_id}/resolve/{commit}/{quote(filename)}"


def _hash_file(path: Path) -> hashlib._Hash:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(4 << 20), b""):
            h.update(block)
    return h


def _append(path: Path, data: bytes, h) -> None:
    try:
        with path.open("ab") as f:
            f.write(data)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFull(f"the disk is full ({e.strerror}) while writing {path.name}: free some space and "
                           "resume the download; the part received so far is kept") from None
        raise
    h.update(data)


async def _acquire(lock: FileLock, on_wait: Callable[[], None]) -> None:
    """Take the blob's cross-process lock; while another process holds it, wait."""
    waited = False
    while True:
        try:
            lock.acquire(timeout=0)
            return
        except Timeout:
            if not waited:
                on_wait()
                waited = True
            await asyncio.sleep(0.5)


async def fetch_file(
    session: aiohttp.ClientSession, url: str, target: CachedFile, size: int | None, sha256: str | None,
    on_progress: Callable[[int], None], *, retry: RetryPolicy | None = None,
    headers: dict[str, str] | None = None, on_wait: Callable[[], None] = lambda: None,
    on_size: Callable[[int], None] = lambda n: None,
) -> Path:
    """Make ``target.blob`` hold the verified file; report bytes present through ``on_progress``.

    ``size`` None (the hub listed none): the size the GET announces is used, after ``on_size``
    was told it (it may raise, e.g. the free-space check, before anything is written); a
    response that announces none raises ``UnsizedFile``."""
    retry = retry or RetryPolicy()
    target.blob.parent.mkdir(parents=True, exist_ok=True)
    target.lock.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(target.lock))
    await _acquire(lock, on_wait)
    try:
        if target.present(size):
            on_progress(target.blob.stat().st_size)
            return target.blob
        return await _fetch_locked(session, url, target, size, sha256, on_progress, retry, headers or {}, on_size)
    finally:
        lock.release()


async def _fetch_locked(session, url, target: CachedFile, size, sha256, on_progress, retry: RetryPolicy,
                        headers: dict, on_size: Callable[[int], None]) -> Path:
    part = target.incomplete
    have = target.partial_bytes()
    if size is not None and have > size:
        part.unlink()
        have = 0
    h = await asyncio.to_thread(_hash_file, part) if have else hashlib.sha256()
    on_progress(have)
    failures = 0
    linked: str | None = None
    while size is None or have < size:
        req = {**headers, "Accept-Encoding": "identity"}  # the file's own bytes, whose size is announced
        if have:
            req["Range"] = f"bytes={have}-"
        before = have
        buf = bytearray()
        try:
            async with session.get(url, headers=req) as r:
                if r.status == 416 and size is not None and have == size:
                    break
                if r.status in RETRYABLE_STATUS:
                    raise aiohttp.ClientResponseError(r.request_info, r.history, status=r.status)
                if r.status >= 400:
                    raise FetchError(f"the hub answered {r.status} for {target.filename}")
                linked = _linked_sha256(r.headers.get("X-Linked-Etag")) or linked
                if have and r.status == 200:  # the server ignored the Range: start over
                    part.unlink(missing_ok=True)
                    have, h = 0, hashlib.sha256()
                    on_progress(0)
                elif r.status == 206 and not r.headers.get("Content-Range", "").startswith(f"bytes {have}-"):
                    raise FetchError(f"the hub sent the wrong range for {target.filename}: "
                                     f"{r.headers.get('Content-Range')!r} (asked from byte {have})")
                if size is None:  # listed without a size: bounded by the one this answer announces
                    size = announced_size(r.headers, r.status)
                    if size is None:
                        raise UnsizedFile(
                            f"{target.filename}: the hub neither lists nor announces its size (no size in the "
                            "listing, no X-Linked-Size or Content-Length): a file of unknown size is not "
                            "downloaded")
                    if have > size:
                        raise _oversized(part, target, size)
                    on_size(size)  # before any byte is written: the free-space check may refuse it
                async for chunk in r.content.iter_any():
                    if size is not None and have + len(buf) + len(chunk) > size:
                        buf.clear()
                        raise _oversized(part, target, size)
                    buf += chunk
                    if len(buf) >= FLUSH_BYTES:
                        await asyncio.to_thread(_append, part, bytes(buf), h)
                        have += len(buf)
                        buf.clear()
                    on_progress(have + len(buf))  # received; written at the next flush
                if buf:
                    await asyncio.to_thread(_append, part, bytes(buf), h)
                    have += len(buf)
                    on_progress(have)
                if have < size:
                    raise aiohttp.ClientPayloadError(f"the connection closed at byte {have} of {size}")
        except asyncio.CancelledError:  # paused, cancelled or shut down: keep every byte received
            if buf:
                _append(part, bytes(buf), h)
            raise
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as e:
            if buf:  # keep what arrived before the cut
                await asyncio.to_thread(_append, part, bytes(buf), h)
                have += len(buf)
                buf.clear()
                on_progress(have)
            failures = 0 if have > before else failures + 1
            if failures >= retry.attempts:
                raise FetchError(f"downloading {target.filename} failed {retry.attempts} times in a row "
                                 f"({e or type(e).__name__}); it resumes from byte {have:,} when pulled again") from None
            delay = retry.delay(max(failures, 1))
            log.info("%s: %s; retrying from byte %d in %.1fs", target.filename, e or type(e).__name__, have, delay)
            await asyncio.sleep(delay)
    if size is not None and have != size:
        raise FetchError(f"{target.filename}: received {have:,} bytes, the hub lists {size:,}")
    await asyncio.to_thread(_verify, part, target, sha256 or linked, h)
    os.replace(part, target.blob)
    return target.blob


def _oversized(part: Path, target: CachedFile, size: int) -> Oversized:
    """A file that grows past its listed size is not the file the listing named: the bytes
    beyond it are never written, the partial file is deleted, and the fetch is not retried."""
    part.unlink(missing_ok=True)
    return Oversized(f"{target.filename}: the hub sent more than the {size:,} bytes it lists; the download "
                     "was stopped and its partial file deleted")


def _verify(part: Path, target: CachedFile, sha256: str | None, h) -> None:
    """Nothing unverified becomes a blob: the LFS sha256 (from the listing or the
    ``X-Linked-Etag`` header), else the git blob id the file is named by."""
    if sha256 is not None:
        got, want, what = h.hexdigest(), sha256, "SHA-256"
    else:  # a file kept in git, not LFS: its blob id is the hash of its content
        got, want, what = git_blob_id(part, "sha1" if len(target.etag) == 40 else "sha256"), target.etag, "git blob id"
    if got != want:
        part.unlink(missing_ok=True)
        raise ChecksumMismatch(
            f"{target.filename} failed its {what} check (got {got[:16]}..., the hub lists "
            f"{want[:16]}...): the damaged file was deleted; pull it again")
