"""Files at rest: the data directory is owner-only, state files are written 0600, and a damaged
state file is moved aside with what can be read kept, never stopping the service."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from runtime.store.downloads import DownloadManager
from runtime.store.registry import Registry
from tests.hardware.ggufs import write_model


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_data_directory_is_created_owner_only(tmp_path):
    target = tmp_path / "fresh" / "hearth"
    code = "from runtime.config import data_dir; print(data_dir())"
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "HEARTH_DATA_DIR": str(target)},
                       capture_output=True, text=True, check=True)
    assert r.stdout.strip() == str(target)
    assert _mode(target) == 0o700


async def test_state_files_are_written_owner_only(tmp_path):
    old = os.umask(0o022)
    try:
        reg = Registry(tmp_path)
        reg.import_file(write_model(tmp_path / "m.gguf", n_layer=1))
        assert _mode(tmp_path / "imports.json") == 0o600
        m = DownloadManager(tmp_path / "downloads.json")
        await m.start()
        m._save()
        await m.close()
        assert _mode(tmp_path / "downloads.json") == 0o600
    finally:
        os.umask(old)


@pytest.mark.parametrize("content", ['[1, 2]', '{"models": 7}', '{"models": [{"id": "no-path"}]}', "\xff\xfe not json"])
def test_a_damaged_imports_file_is_moved_aside_and_the_readable_rows_kept(tmp_path, content):
    good = write_model(tmp_path / "good.gguf", n_layer=1)
    rows = [{"id": "good", "name": "good", "source": "imported", "path": str(good), "size": 1}]
    (tmp_path / "imports.json").write_bytes(content.encode("latin-1"))
    reg = Registry(tmp_path)
    assert [m.id for m in reg.imported()] == []
    assert [m.id for m in reg.models() if m.source == "imported"] == []  # listing works again
    assert list(tmp_path.glob("imports.json.corrupt-*"))
    # a file with one bad row among good ones keeps the good ones
    (tmp_path / "imports.json").write_text(json.dumps({"models": rows + [{"id": 3}]}))
    assert [m.id for m in Registry(tmp_path).imported()] == ["good"]
    assert json.loads((tmp_path / "imports.json").read_text())["models"] == rows


async def test_a_damaged_download_list_keeps_its_readable_rows(tmp_path):
    good = {"id": "a1", "ref": "o/r", "model": "o/r/m.gguf", "repo": "o/r", "commit": "0" * 40,
            "state": "completed", "files": [{"name": "m.gguf", "size": 3, "sha256": "a" * 64, "etag": "a" * 64}]}
    state = tmp_path / "downloads.json"
    state.write_text(json.dumps({"downloads": [good, {"id": "broken"}, "nonsense"]}))
    m = DownloadManager(state)
    await m.start()
    try:
        assert [d.id for d in m.list()] == ["a1"]
        assert "moved to" in m.load_problem
    finally:
        await m.close()
    state.write_bytes(b"\x00\x01garbage")
    m = DownloadManager(state)
    await m.start()
    assert m.list() == [] and m.load_problem
    await m.close()
