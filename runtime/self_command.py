"""The command line that starts this same ``hearth`` again.

In a frozen bundle (PyInstaller sets ``sys.frozen``) the executable *is* the CLI; from a
source checkout or a pip install it is this interpreter running ``runtime.cli``. The desktop
app's tray service, start-on-login and the tests all start Hearth through this.
"""

from __future__ import annotations

import sys


def is_frozen() -> bool:
    return bool(getattr(sys, "frozen", False))


def hearth_argv() -> list[str]:
    """``[executable, ...]`` to which a subcommand and its options are appended."""
    if is_frozen():
        return [sys.executable]
    return [sys.executable, "-m", "runtime.cli"]
