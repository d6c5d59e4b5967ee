"""``downloads.json``: the download manager's list, written owner-only and read defensively.

A write that fails (a full disk) is logged and the list stays in memory, written again at the
next change. A file that cannot be read, or holds rows that are not downloads (a commit or
etag that could not name a cache file, a wrong type), is moved aside
(``downloads.json.corrupt-TIMESTAMP``); the rows that could be read are kept.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from runtime.private_files import move_aside, write_private
from runtime.store.download_state import Download, FileJob
from runtime.store.hf_cache import checked_commit, checked_etag, checked_filename

log = logging.getLogger("hearth.store")


def save_list(path: Path, downloads: list[Download]) -> None:
    rows = [{"id": d.id, "ref": d.ref, "model": d.model_id, "repo": d.repo_id, "commit": d.commit,
             "state": d.state, "error": d.error, "path": d.path, "created": d.created, "convert": d.convert,
             "files": [{"name": j.name, "size": j.size, "sha256": j.sha256, "etag": j.etag} for j in d.files]}
            for d in downloads]
    try:
        write_private(path, json.dumps({"downloads": rows}, indent=1))
    except OSError as e:  # a full disk: the list stays in memory and is written at the next change
        log.warning("cannot write the download list %s: %s", path, e)


def load_list(path: Path) -> tuple[list[Download], str | None]:
    """The persisted downloads, and what was wrong with the file (None when nothing was)."""
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return [], None
    except (OSError, UnicodeDecodeError) as e:
        return [], _set_aside(path, str(e))
    try:
        rows = json.loads(raw)["downloads"]
        if not isinstance(rows, list):
            raise TypeError("'downloads' is not a list")
    except (ValueError, KeyError, TypeError) as e:
        return [], _set_aside(path, str(e) or type(e).__name__)
    out = []
    for r in rows:
        try:
            out.append(_row(r))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("skipping an unreadable download in %s: %s", path, e)
    problem = _set_aside(path, f"{len(rows) - len(out)} unreadable entries") if len(out) < len(rows) else None
    return out, problem


def _row(r: dict) -> Download:
    jobs = [FileJob(f["name"], f["size"], f["sha256"], f["etag"]) for f in r["files"]]
    for j in jobs:
        checked_filename(j.name)
        checked_etag(j.etag, j.name)
        if j.size is not None and (isinstance(j.size, bool) or not isinstance(j.size, int) or j.size < 0):
            raise ValueError(f"size {j.size!r} of {j.name!r}")
    if not all(isinstance(r[k], str) for k in ("id", "ref", "model", "repo", "commit", "state")):
        raise TypeError("a field that must be text is not")
    convert = r.get("convert")
    if convert is not None and convert not in ("gptq", "awq"):
        raise ValueError(f"conversion {convert!r}")
    return Download(r["id"], r["ref"], r["model"], r["repo"], checked_commit(r["commit"]), jobs, r["state"],
                    r.get("error"), r.get("path"), r.get("created", time.time()), convert=convert)


def _set_aside(path: Path, reason: str) -> str | None:
    """Keep the damaged list for the user to look at; the service starts with what was read."""
    try:
        return f"{path} was damaged ({reason}); moved to {move_aside(path, reason)}"
    except OSError as e:
        log.warning("cannot set aside the damaged download list %s: %s", path, e)
        return None
