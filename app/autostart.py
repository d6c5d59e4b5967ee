"""Start Hearth on login, in tray mode: the app's "Start on login" setting.

One entry per platform, written by Hearth and removed when the setting is turned off:

- Linux and other XDG desktops: ``$XDG_CONFIG_HOME/autostart/hearth.desktop`` (default
  ``~/.config``), per the freedesktop Desktop Application Autostart specification;
- macOS: a LaunchAgent, ``~/Library/LaunchAgents/org.hearth.Hearth.plist``, loaded by launchd
  at the next login;
- Windows: the value ``Hearth`` under ``HKCU\\Software\\Microsoft\\Windows\\CurrentVersion\\Run``.

The registered command is this same Hearth (the bundled executable when frozen) with
``app --tray``: the service starts and lives in the tray, without opening the window.
"""

from __future__ import annotations

import os
import plistlib
import re
import subprocess
import sys
from pathlib import Path

from runtime.self_command import hearth_argv

APP_NAME = "Hearth"
LAUNCH_AGENT_LABEL = "org.hearth.Hearth"
RUN_KEY = r"Software\Microsoft\Windows\CurrentVersion\Run"
TRAY_ARGS = ("app", "--tray")

# Characters that force quoting of an Exec argument (Desktop Entry Specification, "The Exec key").
_EXEC_RESERVED = set(" \t\n\"'\\><~|&;$*?#()`")


class AutostartError(OSError):
    """The entry could not be written or removed (the message says where and why)."""


def login_command() -> list[str]:
    """The command line started at login: Hearth's app in tray mode."""
    argv = hearth_argv()
    windowed = {"python.exe": "pythonw.exe", "hearth.exe": "hearthw.exe"}
    if sys.platform == "win32" and Path(argv[0]).name.lower() in windowed:
        # The windowed twin (pythonw, or the bundle's hearthw) opens no console window.
        quiet = Path(argv[0]).with_name(windowed[Path(argv[0]).name.lower()])
        if quiet.is_file():
            argv[0] = str(quiet)
    return [*argv, *TRAY_ARGS]


# -- Linux / XDG ---------------------------------------------------------------------------


def _exec_arg(arg: str) -> str:
    if "\n" in arg or "\r" in arg:
        raise ValueError(f"a desktop entry cannot run an argument with a line break: {arg!r}")
    arg = arg.replace("%", "%%")  # % starts a field code
    if arg == "" or any(c in _EXEC_RESERVED for c in arg):
        arg = '"' + re.sub(r'(["`$\\])', r"\\\1", arg) + '"'
    return arg


def desktop_exec(argv: list[str]) -> str:
    """The value of an ``Exec=`` key that runs ``argv``, quoted and escaped per the spec."""
    line = " ".join(_exec_arg(a) for a in argv)
    return line.replace("\\", "\\\\")  # the string-value escape applies on top of the quoting


def desktop_entry(argv: list[str], icon: Path | str, *, autostart: bool) -> str:
    """A ``.desktop`` file: the login item (``autostart``) or the application launcher."""
    lines = [
        "[Desktop Entry]",
        "Type=Application",
        "Version=1.0",
        f"Name={APP_NAME}",
        "GenericName=Local language models",
        "Comment=Run language models on your own computer",
        f"Exec={desktop_exec(argv)}",
        f"Icon={icon}",
        "Terminal=false",
        "Categories=Utility;",
        "Keywords=LLM;AI;chat;llama;GGUF;",
        "StartupWMClass=hearth",
    ]
    if autostart:
        lines += ["X-GNOME-Autostart-enabled=true", "X-KDE-autostart-after=panel"]
    return "\n".join(lines) + "\n"


class XdgAutostart:
    def __init__(self, config_home: Path | None = None) -> None:
        base = config_home or Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
        self.path = Path(base) / "autostart" / "hearth.desktop"

    def enable(self, argv: list[str]) -> None:
        from app.icons import icon_path

        _write(self.path, desktop_entry(argv, icon_path(256), autostart=True).encode("utf-8"))

    def disable(self) -> None:
        _remove(self.path)

    def enabled(self) -> bool:
        return self.path.is_file()


# -- macOS ---------------------------------------------------------------------------------


def launch_agent_plist(argv: list[str]) -> bytes:
    """The LaunchAgent property list (XML) that runs ``argv`` once at login."""
    return plistlib.dumps({
        "Label": LAUNCH_AGENT_LABEL,
        "ProgramArguments": list(argv),
        "RunAtLoad": True,
        # Once per login: quitting from the tray must not make launchd start it again.
        "KeepAlive": False,
        "ProcessType": "Interactive",
        "LimitLoadToSessionType": "Aqua",
    }, fmt=plistlib.FMT_XML)


class LaunchAgent:
    def __init__(self, home: Path | None = None) -> None:
        self.path = (home or Path.home()) / "Library" / "LaunchAgents" / f"{LAUNCH_AGENT_LABEL}.plist"

    def enable(self, argv: list[str]) -> None:
        _write(self.path, launch_agent_plist(argv))

    def disable(self) -> None:
        # launchd keeps no copy of an agent that was loaded at login and has exited, so
        # removing the file is enough; a running Hearth is not stopped by this setting.
        _remove(self.path)

    def enabled(self) -> bool:
        return self.path.is_file()


# -- Windows -------------------------------------------------------------------------------


def run_key_value(argv: list[str]) -> str:
    """The Run key's command string: Windows command-line quoting (MS C runtime rules)."""
    return subprocess.list2cmdline(argv)


class RunKey:
    """``HKCU\\...\\Run\\Hearth``. ``registry`` is the ``winreg`` module (passed in by tests)."""

    def __init__(self, registry=None) -> None:
        if registry is None:
            import winreg as registry
        self.reg = registry

    def _key(self, access: int):
        return self.reg.CreateKeyEx(self.reg.HKEY_CURRENT_USER, RUN_KEY, 0, access)

    def enable(self, argv: list[str]) -> None:
        with self._key(self.reg.KEY_SET_VALUE) as key:
            self.reg.SetValueEx(key, APP_NAME, 0, self.reg.REG_SZ, run_key_value(argv))

    def disable(self) -> None:
        with self._key(self.reg.KEY_SET_VALUE) as key:
            try:
                self.reg.DeleteValue(key, APP_NAME)
            except FileNotFoundError:
                pass

    def enabled(self) -> bool:
        with self._key(self.reg.KEY_QUERY_VALUE) as key:
            try:
                self.reg.QueryValueEx(key, APP_NAME)
            except FileNotFoundError:
                return False
            return True


# -- the setting ---------------------------------------------------------------------------


def _write(path: Path, data: bytes) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_bytes(data)
        os.replace(partial, path)
    except OSError as e:
        raise AutostartError(f"cannot write the login item {path}: {e.strerror or e}") from e


def _remove(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as e:
        raise AutostartError(f"cannot remove the login item {path}: {e.strerror or e}") from e


def _backend():
    if sys.platform == "win32":
        return RunKey()
    if sys.platform == "darwin":
        return LaunchAgent()
    return XdgAutostart()


def set_enabled(enabled: bool) -> None:
    """Turn start-on-login on (write the entry for this Hearth) or off (remove it)."""
    backend = _backend()
    if enabled:
        backend.enable(login_command())
    else:
        backend.disable()


def is_enabled() -> bool:
    """Whether Hearth's login entry exists for this user."""
    return _backend().enabled()
