"""The macOS and Windows recipes, checked for what can be checked on Linux: the files they
name exist, the plist is well-formed, the Inno Setup script parses into its sections, and the
login item each writes is the one the app's setting writes and removes."""

from __future__ import annotations

import configparser
import importlib.util
import plistlib
import re
import subprocess
from pathlib import Path, PureWindowsPath

import pytest

from app.autostart import LAUNCH_AGENT_LABEL, run_key_value
from runtime import __version__

ROOT = Path(__file__).resolve().parents[2]
INSTALLERS = ROOT / "installers"
ISS = INSTALLERS / "windows" / "hearth.iss"


def _iss() -> tuple[configparser.ConfigParser, dict[str, list[str]]]:
    """[Setup] as key=value; the other sections as their entry lines (Inno's `Name: v; ...`)."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in ISS.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith((";", "#")):  # comments, preprocessor lines
            continue
        m = re.fullmatch(r"\[(\w+)\]", line)
        if m:
            current = m[1]
            assert current not in sections, f"section [{current}] twice"
            sections[current] = []
            continue
        assert current is not None, f"line outside a section: {line}"
        sections[current].append(line)
    setup = configparser.ConfigParser(interpolation=None)
    setup.optionxform = str
    setup.read_string("[Setup]\n" + "\n".join(sections["Setup"]))
    return setup, sections


def _entry(line: str) -> dict[str, str]:
    """`Name: "a"; Flags: x y` -> {"Name": "a", "Flags": "x y"}; "" in a quoted value is one quote."""
    out = {}
    for m in re.finditer(r'(\w+):\s*("(?:[^"]|"")*"|[^;]*)\s*(?:;|$)', line):
        value = m[2].strip()
        if value.startswith('"'):
            value = value[1:-1].replace('""', '"')
        out[m[1]] = value
    return out


def test_inno_script_parses_and_names_files_that_exist():
    setup, sections = _iss()
    assert {"Setup", "Files", "Icons", "Registry", "Run", "Tasks"} <= set(sections)
    s = setup["Setup"]
    for key in ("AppId", "AppName", "AppVersion", "DefaultDirName", "OutputBaseFilename", "SetupIconFile"):
        assert s.get(key), key
    assert s["PrivilegesRequired"] == "lowest"  # per-user install: the Run key is the user's
    icon = ISS.parent / PureWindowsPath(s["SetupIconFile"]).as_posix()
    assert icon.resolve() == (INSTALLERS / "icons" / "hearth.ico").resolve() and icon.is_file()
    # The version default agrees with the one place it is kept.
    assert f'#define AppVersion "{__version__}"' in ISS.read_text()

    files = [_entry(line) for line in sections["Files"]]
    assert files and files[0]["Source"] == r"{#DistDir}\hearth\*" and "recursesubdirs" in files[0]["Flags"]
    # Shortcuts start the windowed executable that the spec builds on Windows.
    spec = (INSTALLERS / "hearth.spec").read_text()
    assert 'name="hearthw"' in spec and "console=False" in spec
    for line in sections["Icons"] + sections["Run"]:
        assert _entry(line)["Filename"] == r"{app}\hearthw.exe"


def test_inno_login_item_is_the_one_the_app_setting_writes():
    _, sections = _iss()
    reg = [_entry(line) for line in sections["Registry"]]
    run = next(r for r in reg if r["Subkey"] == r"Software\Microsoft\Windows\CurrentVersion\Run")
    assert run["Root"] == "HKCU" and run["ValueName"] == "Hearth" and "uninsdeletevalue" in run["Flags"]
    app_dir = r"C:\Users\Ada Lovelace\AppData\Local\Programs\Hearth"
    assert run["ValueData"].replace("{app}", app_dir) == run_key_value([app_dir + r"\hearthw.exe", "app", "--tray"])


def test_macos_bundle_plist_is_well_formed(tmp_path):
    spec = importlib.util.spec_from_file_location("bundle_info", INSTALLERS / "macos" / "bundle_info.py")
    info = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(info)
    data = plistlib.loads(plistlib.dumps(info.info_plist(__version__)))
    assert data["CFBundleIdentifier"] == LAUNCH_AGENT_LABEL == info.BUNDLE_ID
    assert data["CFBundleShortVersionString"] == __version__
    assert (INSTALLERS / "icons" / "hearth.icns").is_file()
    from PIL import Image

    with Image.open(INSTALLERS / "icons" / "hearth.icns") as icns:
        assert (512, 512, 2) in icns.info["sizes"] and (16, 16, 2) in icns.info["sizes"]
    with Image.open(INSTALLERS / "icons" / "hearth.ico") as ico:
        assert {(16, 16), (32, 32), (256, 256)} <= set(ico.info["sizes"])


@pytest.mark.parametrize("script", ["macos/make_dmg.sh", "linux/install.sh"])
def test_shell_scripts_parse(script):
    r = subprocess.run(["sh", "-n", str(INSTALLERS / script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_dmg_script_refuses_a_missing_app(tmp_path):
    r = subprocess.run(["sh", str(INSTALLERS / "macos" / "make_dmg.sh"), str(tmp_path / "Hearth.app"),
                        str(tmp_path / "x.dmg")], capture_output=True, text=True)
    assert r.returncode == 1 and "does not exist" in r.stderr


def test_icons_exist_in_every_size_the_app_and_installers_use():
    from app.icons import PNG_SIZES, icon_files

    from PIL import Image

    for path, size in zip(icon_files(), PNG_SIZES):
        with Image.open(path) as im:
            assert im.size == (size, size) and im.mode == "RGBA", path


def test_installed_app_first_run_message_names_a_model_that_downloads(monkeypatch, tmp_path):
    import sys

    from runtime.store.catalog import CatalogEntry, load_catalog
    from runtime.store.embedded import FIRST_DOWNLOAD, EmbeddedModelMissing, ensure_embedded

    entry = CatalogEntry("smollm2-135m", "SmolLM2", "smollm2", "Apache-2.0", 8192, raw={
        "embedded": {"package": "hearth-no-such-package", "module": "hearth_no_such_module", "file": "m.gguf"}})
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    with pytest.raises(EmbeddedModelMissing) as err:
        ensure_embedded(entry, tmp_path)
    assert "not bundled with Hearth" in str(err.value) and f"hearth pull {FIRST_DOWNLOAD}" in str(err.value)
    suggested = load_catalog()[FIRST_DOWNLOAD]
    assert suggested.embedded is None and suggested.raw.get("repo")  # it comes from the hub
    # nothing half-written (the empty lock file that serialises makers stays, as lock files do)
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and not p.name.endswith(".lock")]

    monkeypatch.setattr(sys, "frozen", False)
    with pytest.raises(EmbeddedModelMissing, match="pip install"):
        ensure_embedded(entry, tmp_path)
