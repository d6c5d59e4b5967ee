"""Build Hearth's installer for the machine this runs on (``make installer``).

- every platform: ``dist/hearth/`` (PyInstaller one-folder bundle, ``installers/hearth.spec``);
- Linux: ``dist/hearth-<version>-linux-<arch>.tar.gz`` with a ``.desktop`` file, the icon and
  ``install.sh`` (adds Hearth to the user's application menu);
- macOS: ``dist/Hearth.app`` and ``dist/Hearth-<version>-macos-<arch>.dmg`` (installers/macos);
- Windows: ``dist/Hearth-<version>-windows-x64-setup.exe`` when Inno Setup's ``iscc`` is on
  PATH (installers/windows/hearth.iss).

Prints one JSON line at the end: what was built, its size and how long the build took.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.autostart import desktop_entry  # noqa: E402
from app.icons import icon_path  # noqa: E402
from runtime import __version__  # noqa: E402



def _arch() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "aarch64": "arm64"}.get(machine, machine)


def dir_size(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if not p.is_dir())


def run_pyinstaller(dist: Path, work: Path) -> None:
    subprocess.run([sys.executable, "-m", "PyInstaller", "--noconfirm", "--clean", "--log-level", "WARN",
                    "--distpath", str(dist), "--workpath", str(work), str(ROOT / "installers" / "hearth.spec")],
                   check=True, cwd=ROOT)


def linux_extras(bundle: Path) -> None:
    """The desktop entry (for `hearth` on PATH; install.sh writes one with this folder's path)."""
    (bundle / "hearth.desktop").write_text(desktop_entry(["hearth", "app"], "hearth", autostart=False))
    shutil.copyfile(icon_path(256), bundle / "hearth.png")
    shutil.copy2(ROOT / "installers" / "linux" / "install.sh", bundle / "install.sh")


def linux_tarball(dist: Path, bundle: Path) -> Path:
    out = dist / f"hearth-{__version__}-linux-{_arch()}.tar.gz"
    with tarfile.open(out, "w:gz", compresslevel=6) as tar:
        tar.add(bundle, arcname="hearth")
    return out


def macos_dmg(dist: Path) -> Path:
    out = dist / f"Hearth-{__version__}-macos-{_arch()}.dmg"
    subprocess.run(["sh", str(ROOT / "installers" / "macos" / "make_dmg.sh"), str(dist / "Hearth.app"), str(out)],
                   check=True)
    return out


def windows_setup(dist: Path, variant: str) -> Path | None:
    iscc = shutil.which("iscc") or shutil.which("ISCC")
    if iscc is None:
        print("installer: Inno Setup's iscc is not on PATH: dist\\hearth is built, the setup program is not",
              file=sys.stderr)
        return None
    subprocess.run([iscc, f"/DAppVersion={__version__}", f"/DVariant={variant}", f"/DDistDir={dist}",
                    str(ROOT / "installers" / "windows" / "hearth.iss")], check=True)
    suffix = "" if variant == "cpu" else f"-{variant}"
    return dist / f"Hearth-{__version__}-windows-x64{suffix}-setup.exe"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dist", type=Path, default=ROOT / "dist")
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "pyinstaller")
    ap.add_argument("--no-package", action="store_true", help="only the dist/hearth folder")
    ap.add_argument("--variant", default=os.environ.get("HEARTH_VARIANT", "cpu"),
                    help="Windows: names the setup program (cpu, cuda)")
    args = ap.parse_args(argv)
    start = time.monotonic()
    run_pyinstaller(args.dist, args.work)
    bundle = args.dist / "hearth"
    built_s = time.monotonic() - start
    package = None
    if not args.no_package:
        if sys.platform.startswith("linux"):
            linux_extras(bundle)
            package = linux_tarball(args.dist, bundle)
        elif sys.platform == "darwin":
            package = macos_dmg(args.dist)
        elif sys.platform == "win32":
            package = windows_setup(args.dist, args.variant)
    report = {"version": __version__, "bundle": str(bundle), "bundle_bytes": dir_size(bundle),
              "pyinstaller_s": round(built_s, 1), "total_s": round(time.monotonic() - start, 1)}
    if package is not None:
        report.update(package=str(package), package_bytes=package.stat().st_size)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
