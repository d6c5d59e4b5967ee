"""Render Hearth's app icon (app/resources/icons/hearth.svg) to the files each platform needs.

    python installers/make_icons.py

writes ``hearth-<size>.png`` (16 … 512) beside the SVG, for the window, the tray and the Linux
desktop entry, and ``installers/icons/hearth.ico`` (Windows) and ``hearth.icns`` (macOS). The
outputs are committed; run this again after changing the SVG. Needs PySide6 (QtSvg renders the
SVG) and Pillow (writes ICO and ICNS).
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.icons import ICON_DIR, PNG_SIZES, icon_path  # noqa: E402

SVG = ICON_DIR / "hearth.svg"
OUT = ROOT / "installers" / "icons"
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
ICNS_SIZES = (16, 32, 64, 128, 256, 512)


def render_png(size: int) -> bytes:
    from PySide6.QtCore import QBuffer, QIODevice, Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    _app = QGuiApplication.instance() or QGuiApplication([])  # noqa: F841 (QPainter needs one)
    renderer = QSvgRenderer(str(SVG))
    if not renderer.isValid():
        raise SystemExit(f"{SVG} is not a valid SVG")
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    buf = QBuffer()
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buf, "PNG")
    return bytes(buf.data())


def main() -> None:
    from PIL import Image

    OUT.mkdir(parents=True, exist_ok=True)
    images = {}
    for size in PNG_SIZES:
        data = render_png(size)
        icon_path(size).write_bytes(data)
        images[size] = Image.open(io.BytesIO(data)).convert("RGBA")
    # Each size rendered from the vector, not scaled down from 512, so small ones stay crisp.
    images[512].save(OUT / "hearth.ico", sizes=[(s, s) for s in ICO_SIZES],
                     append_images=[images[s] for s in ICO_SIZES if s != 512])
    images[512].save(OUT / "hearth.icns", append_images=[images[s] for s in ICNS_SIZES if s != 512])
    print(f"wrote {len(PNG_SIZES)} PNGs to {ICON_DIR}, hearth.ico and hearth.icns to {OUT}")


if __name__ == "__main__":
    main()
