"""Line icons for navigation and actions, drawn from small SVG paths in the theme's colour."""

from __future__ import annotations

import functools

from PySide6.QtCore import QByteArray, QRectF, Qt
from PySide6.QtGui import QIcon, QImage, QPainter, QPixmap

_PATHS = {
    "chat": '<path d="M4 5.5h16a1 1 0 0 1 1 1V16a1 1 0 0 1-1 1H9l-5 4V6.5a1 1 0 0 1 1-1z"/>',
    "models": '<path d="M12 3l9 5-9 5-9-5z"/><path d="M3 13l9 5 9-5"/><path d="M3 17.5l9 5 9-5" opacity="0.55"/>',
    "server": '<rect x="3" y="4" width="18" height="7" rx="2"/><rect x="3" y="13" width="18" height="7" rx="2"/>'
              '<path d="M7 7.5h.01M7 16.5h.01" stroke-width="3"/>',
    "settings": '<path d="M4 6h9M17 6h3M4 12h3M11 12h9M4 18h11M19 18h1"/><circle cx="15" cy="6" r="2"/>'
                '<circle cx="9" cy="12" r="2"/><circle cx="17" cy="18" r="2"/>',
    "sidebar": '<rect x="3.5" y="4.5" width="17" height="15" rx="2"/><path d="M9.5 4.5v15"/>',
    "plus": '<path d="M12 5v14M5 12h14"/>',
    "send": '<path d="M5 12l15-7-5 15-3-6z"/><path d="M12 14l8-9"/>',
    "stop": '<rect x="6" y="6" width="12" height="12" rx="2.5"/>',
    "attach": '<path d="M17 8l-7.4 7.4a2.3 2.3 0 0 0 3.3 3.3l7.3-7.4a4.4 4.4 0 0 0-6.2-6.2L6.4 12.7a6.4 6.4 0 0 0 9 9"/>',
    "search": '<circle cx="11" cy="11" r="6.5"/><path d="M20 20l-4.2-4.2"/>',
    "tools": '<path d="M14.7 6.3a4 4 0 0 0 5 5l-8.6 8.6a2.2 2.2 0 0 1-3.1-3.1z"/><path d="M14.7 6.3L17.5 3.5"/>',
    "copy": '<rect x="8" y="8" width="12" height="12" rx="2"/><path d="M16 8V5a1 1 0 0 0-1-1H5a1 1 0 0 0-1 1v10a1 1 0 0 0 1 1h3"/>',
    "sliders": '<path d="M6 4v16M12 4v16M18 4v16" opacity="0.35"/><circle cx="6" cy="14" r="2"/>'
               '<circle cx="12" cy="8" r="2"/><circle cx="18" cy="16" r="2"/>',
    "library": '<path d="M5 4h4v16H5zM10 4h4v16h-4z"/><path d="M15.5 5l3.8-1 3.2 15.5-3.8 1z"/>',
    "refresh": '<path d="M20 11a8 8 0 1 0-2.3 5.7"/><path d="M20 4v7h-7"/>',
    "check": '<path d="M5 12.5l4.5 4.5L19 7.5"/>',
    "x": '<path d="M6.5 6.5l11 11M17.5 6.5l-11 11"/>',
    "clock": '<circle cx="12" cy="12" r="8.5"/><path d="M12 7.5V12l3 2"/>',
    "ban": '<circle cx="12" cy="12" r="8.5"/><path d="M6 18L18 6"/>',
    "question": '<circle cx="12" cy="12" r="8.5"/><path d="M9.6 9.5a2.5 2.5 0 1 1 3.4 2.3c-.6.3-1 .8-1 1.5v.4"/>'
                '<path d="M12 16.8h.01" stroke-width="2.6"/>',
    "dots": '<path d="M6 12h.01M12 12h.01M18 12h.01" stroke-width="3"/>',
    "gear": '<circle cx="12" cy="12" r="3"/><path d="M12 3v2.5M12 18.5V21M3 12h2.5M18.5 12H21M5.6 5.6l1.8 1.8'
            'M16.6 16.6l1.8 1.8M5.6 18.4l1.8-1.8M16.6 7.4l1.8-1.8"/>',
    "chevron-right": '<path d="M9.5 6l6 6-6 6"/>',
    "chevron-left": '<path d="M14.5 6l-6 6 6 6"/>',
    "chevron-down": '<path d="M6 9.5l6 6 6-6"/>',
    "file": '<path d="M7 3.5h7l4 4V20a.5.5 0 0 1-.5.5h-10.5a.5.5 0 0 1-.5-.5V4a.5.5 0 0 1 .5-.5z"/><path d="M14 3.5V8h4"/>',
}


@functools.lru_cache(maxsize=256)
def icon(name: str, colour: str, size: int = 20) -> QIcon:
    """The named icon as a QIcon, stroked in ``colour`` (each drawn once: a message's tool blocks
    ask for theirs every time it is built)."""
    from PySide6.QtSvg import QSvgRenderer

    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" stroke="{colour}" '
           f'stroke-width="1.8" stroke-linecap="round" stroke-linejoin="round">{_PATHS[name]}</svg>')
    renderer = QSvgRenderer(QByteArray(svg.encode()))
    out = QIcon()
    for scale in (1, 2):
        img = QImage(size * scale, size * scale, QImage.Format.Format_ARGB32_Premultiplied)
        img.fill(Qt.GlobalColor.transparent)
        p = QPainter(img)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        renderer.render(p, QRectF(0, 0, size * scale, size * scale))
        p.end()
        pm = QPixmap.fromImage(img)
        pm.setDevicePixelRatio(scale)
        out.addPixmap(pm)
    return out


def names() -> list[str]:
    return list(_PATHS)
