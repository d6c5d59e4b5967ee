"""Nothing in the data directory is open to other users: the embedded models the service places
(``models/``, the ONNX embedder's folder), a quantize job's ``quantized/`` folder and whatever
the quantizer writes there were made with the umask (0755 folders, 0644 files); every folder is
0700 and every file 0600 whatever the umask."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import httpx
import pytest

from runtime.import_confirm import CONFIRM_HEADER, load_token
from runtime.server.launcher import ServiceProcess


def open_to_others(root: Path) -> list[str]:
    """Every folder and file under ``root`` that a group or other user may read, write or enter."""
    out = []
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder, name)
            mode = stat.S_IMODE(path.lstat().st_mode)
            if not path.is_symlink() and mode & 0o077:
                out.append(f"{path.relative_to(root)} {oct(mode)}")
    return sorted(out)


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
@pytest.mark.timeout(600)
def test_nothing_the_service_writes_in_its_data_directory_is_open_to_other_users(smollm2_path, minilm_path,
                                                                                 tmp_path):
    data = tmp_path / "data"
    before = os.umask(0o022)  # the usual umask, which the service inherits
    try:
        server = ServiceProcess("--parallel", "1", "--ctx", "1024",
                                env={**os.environ, "HEARTH_DATA_DIR": str(data)}).wait_ready()
    finally:
        os.umask(before)
    confirm = {CONFIRM_HEADER: load_token(data)}
    try:
        r = httpx.post(f"{server.url}/v1/embeddings", json={"model": "minilm-l6", "input": "hi"}, timeout=300)
        assert r.status_code == 200, r.text
        assert (data / "models" / "minilm-l6" / "model.onnx").is_file() and (data / "models" / "smollm2-135m.gguf").is_file()
        job = httpx.post(f"{server.url}/hearth/quantize", headers=confirm, timeout=30,
                         json={"model": "smollm2-135m", "to": "Q8_0", "compare": False})
        assert job.status_code == 202, job.text
        deadline = time.monotonic() + 180
        while not list((data / "quantized").glob("*.work")):  # the quantizer's first folder
            assert time.monotonic() < deadline, "the quantizer wrote nothing"
            time.sleep(0.2)
        stopped = httpx.delete(f"{server.url}/hearth/quantize/{job.json()['id']}", headers=confirm, timeout=30)
        assert stopped.json()["state"] == "stopped"
    finally:
        server.stop()
    assert open_to_others(data) == []
