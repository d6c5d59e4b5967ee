"""A second launch raises the first window instead of starting a second app (real local sockets;
a real second process for the launch)."""

from __future__ import annotations

import subprocess
import sys

from app.single_instance import claim, socket_name


def test_the_second_claim_raises_the_first(driver, tmp_path):
    first = claim(tmp_path)
    assert first is not None
    raised: list[bool] = []
    first.activated.connect(lambda: raised.append(True))
    try:
        assert claim(tmp_path) is None  # the second launch: told to quit
        driver.until(lambda: raised, 5, "the first app to be asked for its window")
        other = claim(tmp_path / "other")  # another data directory: another app
        assert other is not None
        other.close()
        code = ("import sys; from PySide6.QtCore import QCoreApplication; app = QCoreApplication([]);"
                "from app.single_instance import claim; from pathlib import Path;"
                f"sys.exit(0 if claim(Path({str(tmp_path)!r})) is None else 3)")
        proc = subprocess.run([sys.executable, "-c", code], timeout=60)
        assert proc.returncode == 0, "a launch in another process did not find the first app"
        driver.until(lambda: len(raised) == 2, 5, "the window raised for the other process")
    finally:
        first.close()
    assert socket_name(tmp_path) != socket_name(tmp_path / "other")
