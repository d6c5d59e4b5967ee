"""Hearth's app icon files (drawn by ``installers/make_icons.py``), for windows, tray and installers.

Found beside this module, so the same lookup works from a checkout, a pip install and the
frozen bundle (which keeps ``app/resources/icons`` next to the bundled modules).
"""

from __future__ import annotations

from pathlib import Path

ICON_DIR = Path(__file__).resolve().parent / "resources" / "icons"
PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def icon_path(size: int = 256) -> Path:
    """The PNG of the given size (one of ``PNG_SIZES``)."""
    if size not in PNG_SIZES:
        raise ValueError(f"no {size}px icon: sizes are {', '.join(map(str, PNG_SIZES))}")
    return ICON_DIR / f"hearth-{size}.png"


def icon_files() -> list[Path]:
    """Every PNG size, smallest first: add each to a ``QIcon`` so Qt picks the sharpest."""
    return [icon_path(s) for s in PNG_SIZES]
