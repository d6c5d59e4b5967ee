"""Start-on-login: the XDG entry for real on this machine; the macOS and Windows entries as
far as they exist here (the plist through plistlib, the Run key against an in-memory registry,
since winreg is Windows-only)."""

from __future__ import annotations

import configparser
import plistlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app import autostart
from app.autostart import (LaunchAgent, RunKey, desktop_entry, desktop_exec, launch_agent_plist,
                           login_command, run_key_value)


def _validate(path: Path) -> None:
    tool = shutil.which("desktop-file-validate")
    if tool is None:
        pytest.skip("desktop-file-validate is not installed (Debian package desktop-file-utils; "
                    ".ci/run installs it)")
    r = subprocess.run([tool, str(path)], capture_output=True, text=True)
    # It prints hints and errors; only errors make the exit status non-zero.
    assert r.returncode == 0 and "error:" not in r.stdout, r.stdout + r.stderr


def _exec_argv(entry_text: str) -> list[str]:
    """The Exec key read back as a launcher does: undo the string escape, then the quoting."""
    parser = configparser.RawConfigParser(interpolation=None, delimiters=("=",))
    parser.optionxform = str
    parser.read_string(entry_text)
    value = re.sub(r"\\(.)", lambda m: {"s": " ", "n": "\n", "t": "\t", "r": "\r"}.get(m[1], m[1]),
                   parser["Desktop Entry"]["Exec"])
    args, arg, quoted, i = [], None, False, 0
    while i < len(value):
        c = value[i]
        if quoted and c == "\\" and value[i + 1] in '"`$\\':
            arg, i = arg + value[i + 1], i + 2
            continue
        if c == '"':
            quoted, arg = not quoted, arg or ""
        elif c == " " and not quoted:
            if arg is not None:
                args.append(arg)
            arg = None
        else:
            arg = (arg or "") + c
        i += 1
    assert not quoted, value
    return [a.replace("%%", "%") for a in args + ([arg] if arg is not None else [])]


def test_linux_entry_appears_is_valid_and_disappears(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    entry = tmp_path / "config" / "autostart" / "hearth.desktop"
    assert not autostart.is_enabled()

    autostart.set_enabled(True)
    assert entry.is_file() and autostart.is_enabled()
    _validate(entry)
    text = entry.read_text()
    assert _exec_argv(text) == login_command()
    assert login_command()[-2:] == ["app", "--tray"]
    assert "X-GNOME-Autostart-enabled=true" in text

    autostart.set_enabled(True)  # turning it on twice keeps one entry
    assert sorted(p.name for p in entry.parent.iterdir()) == ["hearth.desktop"]

    autostart.set_enabled(False)
    assert not entry.exists() and not autostart.is_enabled()
    autostart.set_enabled(False)  # and off twice is no error


def test_linux_entry_default_location_is_home_config(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    autostart.set_enabled(True)
    assert (tmp_path / ".config" / "autostart" / "hearth.desktop").is_file()
    autostart.set_enabled(False)
    assert not (tmp_path / ".config" / "autostart" / "hearth.desktop").exists()


def test_exec_quotes_paths_with_spaces_and_reserved_characters(tmp_path):
    argv = ["/opt/My Apps/hearth $1/hearth", "app", "--tray", 'say "hi"', "100%", "back\\slash"]
    text = desktop_entry(argv, "hearth", autostart=True)
    assert _exec_argv(text) == argv
    path = tmp_path / "hearth.desktop"
    path.write_text(text)
    _validate(path)
    assert desktop_exec(["/usr/bin/hearth", "app"]) == "/usr/bin/hearth app"  # nothing to quote


def test_exec_refuses_a_line_break():
    with pytest.raises(ValueError, match="line break"):
        desktop_exec(["/bin/hearth\nrm"])


def test_frozen_bundle_registers_its_own_executable(monkeypatch):
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", "/opt/hearth/hearth")
    assert login_command() == ["/opt/hearth/hearth", "app", "--tray"]


def test_source_install_runs_the_cli_module():
    assert login_command() == [sys.executable, "-m", "runtime.cli", "app", "--tray"]


def test_launch_agent_plist_round_trips_with_the_keys_launchd_reads(tmp_path):
    argv = ["/Applications/Hearth.app/Contents/MacOS/hearth", "app", "--tray"]
    data = plistlib.loads(launch_agent_plist(argv))
    assert data["Label"] == "org.hearth.Hearth"
    assert data["ProgramArguments"] == argv
    assert data["RunAtLoad"] is True and data["KeepAlive"] is False
    assert launch_agent_plist(argv).startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE plist')

    agent = LaunchAgent(home=tmp_path)
    agent.enable(argv)
    assert agent.path == tmp_path / "Library/LaunchAgents/org.hearth.Hearth.plist"
    assert agent.enabled()
    with agent.path.open("rb") as f:
        assert plistlib.load(f)["ProgramArguments"] == argv
    agent.disable()
    assert not agent.path.exists() and not agent.enabled()


def test_run_key_value_quotes_like_the_windows_command_line():
    assert run_key_value([r"C:\Program Files\Hearth\hearth.exe", "app", "--tray"]) == \
        r'"C:\Program Files\Hearth\hearth.exe" app --tray'
    assert run_key_value([r"C:\Hearth\hearth.exe", "app", "--tray"]) == r"C:\Hearth\hearth.exe app --tray"


class _Registry:
    """The part of ``winreg`` that RunKey uses, over a dict: winreg exists only on Windows."""

    HKEY_CURRENT_USER, KEY_SET_VALUE, KEY_QUERY_VALUE, REG_SZ = 1, 2, 1, 1

    def __init__(self):
        self.keys: dict[tuple[int, str], dict[str, tuple[int, str]]] = {}

    class _Key:
        def __init__(self, values):
            self.values = values

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def CreateKeyEx(self, root, sub, reserved, access):
        return self._Key(self.keys.setdefault((root, sub), {}))

    def SetValueEx(self, key, name, reserved, kind, value):
        key.values[name] = (kind, value)

    def DeleteValue(self, key, name):
        if name not in key.values:
            raise FileNotFoundError(2, "The system cannot find the file specified")
        del key.values[name]

    def QueryValueEx(self, key, name):
        if name not in key.values:
            raise FileNotFoundError(2, "The system cannot find the file specified")
        return key.values[name][1], key.values[name][0]


def test_run_key_is_written_under_hkcu_run_and_removed():
    reg = _Registry()
    run = RunKey(reg)
    assert not run.enabled()
    run.enable([r"C:\Program Files\Hearth\hearth.exe", "app", "--tray"])
    values = reg.keys[(reg.HKEY_CURRENT_USER, r"Software\Microsoft\Windows\CurrentVersion\Run")]
    assert values == {"Hearth": (reg.REG_SZ, r'"C:\Program Files\Hearth\hearth.exe" app --tray')}
    assert run.enabled()
    run.disable()
    assert values == {} and not run.enabled()
    run.disable()


def test_the_registered_command_is_one_the_cli_accepts():
    from runtime.cli import build_parser

    args = build_parser().parse_args(login_command()[-2:])
    assert args.command == "app" and args.tray and not args.smoke_test
