"""Small pictures of attached images: a chip's icon and the thumbnails in a sent message.

Images are scaled once, when first shown, and kept by content (a long chat with the same
screenshot in every turn decodes it once); one that Qt cannot read shows a plain file icon."""

from __future__ import annotations

import base64
import hashlib
from collections import OrderedDict

from PySide6.QtCore import Qt
from PySide6.QtGui import QIcon, QImage, QPixmap

#: the longest side of a thumbnail in a message, in pixels
THUMB = 160


_cache: OrderedDict[tuple[str, int], QPixmap | None] = OrderedDict()


def _scaled(data: str, side: int) -> QPixmap | None:
    image = QImage()
    try:
        raw = base64.b64decode(data)
    except ValueError:
        return None
    if not image.loadFromData(raw) or image.isNull():
        return None
    if max(image.width(), image.height()) > side:
        image = image.scaled(side, side, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation)
    return QPixmap.fromImage(image)


def thumbnail(data: str, side: int = THUMB) -> QPixmap | None:
    """The image in ``data`` (base64) scaled to at most ``side`` pixels; None when unreadable."""
    key = (hashlib.blake2b(data.encode("ascii", "replace"), digest_size=16).hexdigest(), side)
    if key in _cache:
        _cache.move_to_end(key)
        return _cache[key]
    pix = _cache[key] = _scaled(data, side)
    while len(_cache) > 64:
        _cache.popitem(last=False)
    return pix


def thumbnail_icon(data: str) -> QIcon:
    from app.ui.documents_ui import file_icon

    pix = thumbnail(data, 56)
    return QIcon(pix) if pix is not None else file_icon()
