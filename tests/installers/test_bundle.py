"""The Linux bundle, built here with PyInstaller and run as a user would run it.

Runs only with ``HEARTH_TEST_INSTALLERS=1`` (``.ci/run`` sets it): the build takes minutes.
It builds ``dist/hearth`` and the tarball into a temporary folder (``installers/build.py``,
what ``make installer`` runs), starts the bundled ``hearth serve`` on an ephemeral port with
an empty data directory, checks the first-run message, gives it the default model as its
package would, streams a completion over the API, opens the bundled app offscreen, and stops
both. Bundle size, build time and cold start time are printed as one JSON line.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from runtime import __version__
from runtime.server.launcher import free_port

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.skipif(os.environ.get("HEARTH_TEST_INSTALLERS") != "1",
                       reason="builds the installer bundle (minutes): set HEARTH_TEST_INSTALLERS=1"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the bundle test builds the Linux bundle"),
]

MEASURED: dict = {}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("installer")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.monotonic()
    r = subprocess.run([sys.executable, str(ROOT / "installers" / "build.py"), "--dist", str(out / "dist"),
                        "--work", str(out / "work")], capture_output=True, text=True, env=env, timeout=1800)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-8000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    MEASURED.update(build_s=round(time.monotonic() - start, 1), bundle_mib=round(report["bundle_bytes"] / 2**20, 1),
                    tarball_mib=round(report["package_bytes"] / 2**20, 1))
    return out / "dist"


def _exe(dist: Path) -> Path:
    return dist / "hearth" / "hearth"


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


def _post(url: str, body: dict, timeout: float = 300):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=timeout)


@pytest.mark.timeout(2400)
def test_bundle_layout_version_and_tarball(built):
    exe = _exe(built)
    assert exe.is_file() and os.access(exe, os.X_OK)
    r = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == f"hearth {__version__}", r.stdout + r.stderr
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "serve" in r.stdout

    internal = built / "hearth" / "_internal"
    assert (internal / "models" / "catalog.json").is_file()
    assert (internal / "app" / "resources" / "icons" / "hearth-256.png").is_file()
    lib = internal / "llama_cpp" / "lib"
    assert (lib / "libllama.so").exists() and (lib / "libggml.so").exists()
    assert (lib / "libllama.so").is_symlink(), "one copy of each llama.cpp library, the other names link to it"
    # The embedded model is not in the bundle: it comes on first run.
    assert not list((built / "hearth").rglob("*.gguf"))

    tarball = built / f"hearth-{__version__}-linux-x86_64.tar.gz"
    with tarfile.open(tarball) as tar:
        names = set(tar.getnames())
    assert {"hearth/hearth", "hearth/hearth.desktop", "hearth/hearth.png", "hearth/install.sh",
            "hearth/_internal/models/catalog.json"} <= names
    validate = shutil.which("desktop-file-validate")
    if validate:
        v = subprocess.run([validate, str(built / "hearth" / "hearth.desktop")], capture_output=True, text=True)
        assert v.returncode == 0 and "error:" not in v.stdout, v.stdout


@pytest.mark.timeout(1200)
def test_install_sh_adds_and_removes_the_menu_entry(built, tmp_path):
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "share")}
    script = built / "hearth" / "install.sh"
    r = subprocess.run(["sh", str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    entry = tmp_path / "share" / "applications" / "hearth.desktop"
    assert f'Exec="{built / "hearth" / "hearth"}" app' in entry.read_text()
    assert (tmp_path / "share" / "icons" / "hicolor" / "256x256" / "apps" / "hearth.png").is_file()
    validate = shutil.which("desktop-file-validate")
    if validate:
        v = subprocess.run([validate, str(entry)], capture_output=True, text=True)
        assert v.returncode == 0 and "error:" not in v.stdout, v.stdout
    r = subprocess.run(["sh", str(script), "--uninstall"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and not entry.exists()


@pytest.mark.timeout(1200)
def test_bundled_service_first_run_then_streams_with_the_default_model(built, tmp_path, smollm2_path, capsys):
    data = tmp_path / "data"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["HEARTH_DATA_DIR"] = str(data)
    log = (tmp_path / "serve.log").open("w+")
    start = time.monotonic()
    proc = subprocess.Popen([str(_exe(built)), "serve", "--host", "127.0.0.1", "--port", str(port), "--ctx", "2048"],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        health = None
        while time.monotonic() - start < 300:
            assert proc.poll() is None, f"bundled hearth serve exited {proc.returncode}:\n{_read(log)}"
            try:
                health = _get(f"{url}/health")
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.05)
        MEASURED["cold_start_s"] = round(time.monotonic() - start, 2)
        assert health and health["status"] == "ok" and health["version"] == __version__

        # First run, empty data directory, no model package in the bundle: a clear message.
        hint = "hearth pull smollm2-360m"
        deadline = time.monotonic() + 120
        while hint not in _read(log) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "not bundled with Hearth" in _read(log) and hint in _read(log), _read(log)
        body = {"messages": [{"role": "user", "content": "Name a color."}], "max_tokens": 16,
                "temperature": 0, "stream": True}
        with pytest.raises(urllib.error.HTTPError) as err:
            _post(f"{url}/v1/chat/completions", body)
        assert err.value.code == 400 and hint in json.loads(err.value.read())["error"]["message"]

        # The default model placed as its package (or `hearth pull`) places it: the next request loads it.
        (data / "models").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(smollm2_path, data / "models" / "smollm2-135m.gguf")
        t0 = time.monotonic()
        chunks, first = [], None
        with _post(f"{url}/v1/chat/completions", body) as resp:
            assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
            for raw in resp:
                line = raw.decode().strip()
                if not line.startswith("data: "):
                    continue
                if line == "data: [DONE]":
                    chunks.append(None)
                    break
                delta = json.loads(line[6:])["choices"][0]["delta"].get("content")
                if delta:
                    first = first or time.monotonic()
                    chunks.append(delta)
        assert chunks and chunks[-1] is None and "".join(c for c in chunks if c).strip(), chunks
        MEASURED["first_token_with_model_load_s"] = round(first - t0, 2)
        assert _get(f"{url}/health")["engine"]["state"] == "running"

        # A vision model (a projector beside it) reads an image: Pillow and libmtmd are in the bundle.
        from tests.engine.test_media import png
        from tests.media_models import TOKENS_PER_IMAGE, write_projector

        vlm = data / "vlm" / "SmolTiny-VL-Q8_0.gguf"
        vlm.parent.mkdir()
        shutil.copyfile(smollm2_path, vlm)
        write_projector(vlm.parent / "mmproj-SmolTiny-VL-f16.gguf", 576, vision="mlp")
        image = "data:image/png;base64," + base64.b64encode(png(3)).decode()
        with _post(f"{url}/v1/chat/completions", {"model": str(vlm), "max_tokens": 4, "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}},
                                             {"type": "text", "text": "What is it?"}]}]}) as resp:
            answer = json.loads(resp.read())
        assert answer["usage"]["prompt_tokens"] > TOKENS_PER_IMAGE["mlp"] and answer["choices"][0]["message"]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
    assert rc == 0, _read(log)
    # The engine worker (a spawned copy of the bundled executable) ended with the service.
    assert not _group_alive(proc.pid), "a process of the bundled service outlived it"
    with capsys.disabled():
        print("\nbundle:", json.dumps(MEASURED))


@pytest.mark.timeout(600)
def test_bundled_app_opens_its_main_window_and_starts_the_bundled_service(built, tmp_path, capsys):
    """The app as a double-click starts it: no service runs, so it starts the bundle's own."""
    exe = _exe(built)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(QT_QPA_PLATFORM="offscreen", HEARTH_DATA_DIR=str(tmp_path / "data"))
    helped = subprocess.run([str(exe), "app", "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert helped.returncode == 0 and "--smoke-test" in helped.stdout and "--tray" in helped.stdout, helped.stdout
    port = free_port()
    start = time.monotonic()
    r = subprocess.run([str(exe), "app", "--smoke-test", "--port", str(port)], capture_output=True, text=True,
                       env=env, timeout=400)
    MEASURED["app_smoke_s"] = round(time.monotonic() - start, 2)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "main window shown" in r.stdout and "service running" in r.stdout, r.stdout
    # The app stopped the service it started.
    with pytest.raises(urllib.error.URLError):
        _get(f"http://127.0.0.1:{port}/health")
    with capsys.disabled():
        print("\nbundle:", json.dumps(MEASURED))


def _read(log) -> str:
    log.flush()
    log.seek(0)
    return log.read()


def _group_alive(pgid: int) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        time.sleep(0.1)
    os.killpg(pgid, signal.SIGKILL)
    return True
