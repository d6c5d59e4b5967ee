"""Qt list models, one per collection: conversations, messages, catalog entries, downloads, local models.

Each holds plain Python objects (dataclasses or dicts) and exposes them through roles; widgets
bind to these models, services fill them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt

from app.api_types import CatalogModel, LocalModel
from app.conversations import Conversation, Message

T = TypeVar("T")
ObjectRole = Qt.ItemDataRole.UserRole + 1
KeyRole = Qt.ItemDataRole.UserRole + 2
_Index = QModelIndex | QPersistentModelIndex
#: the invalid index: a list's root, the default parent of Qt's model methods (never modified)
_ROOT = QModelIndex()


class ObjectListModel(QAbstractListModel, Generic[T]):
    """A list of objects with a display text and a key; updates in place by key."""

    def __init__(self, display: Callable[[T], str], key: Callable[[T], Any]) -> None:
        super().__init__()
        self._items: list[T] = []
        self._display, self._key = display, key

    def rowCount(self, parent: _Index = _ROOT) -> int:
        return 0 if parent.isValid() else len(self._items)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._items):
            return None
        item = self._items[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return self._display(item)
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._display(item)
        if role == ObjectRole:
            return item
        if role == KeyRole:
            return self._key(item)
        return None

    def items(self) -> list[T]:
        return list(self._items)

    def item(self, row: int) -> T:
        return self._items[row]

    def row_of(self, key: Any) -> int | None:
        for i, it in enumerate(self._items):
            if self._key(it) == key:
                return i
        return None

    def reset(self, items: list[T]) -> None:
        self.beginResetModel()
        self._items = list(items)
        self.endResetModel()

    def append(self, item: T) -> None:
        n = len(self._items)
        self.beginInsertRows(QModelIndex(), n, n)
        self._items.append(item)
        self.endInsertRows()

    def extend(self, items: list[T]) -> None:
        """Append several items in one insertion."""
        if not items:
            return
        n = len(self._items)
        self.beginInsertRows(QModelIndex(), n, n + len(items) - 1)
        self._items.extend(items)
        self.endInsertRows()

    def insert(self, row: int, item: T) -> None:
        self.beginInsertRows(QModelIndex(), row, row)
        self._items.insert(row, item)
        self.endInsertRows()

    def remove_from(self, row: int) -> None:
        """Remove ``row`` and every row after it."""
        if row >= len(self._items):
            return
        self.beginRemoveRows(QModelIndex(), row, len(self._items) - 1)
        del self._items[row:]
        self.endRemoveRows()

    def remove(self, key: Any) -> None:
        row = self.row_of(key)
        if row is not None:
            self.beginRemoveRows(QModelIndex(), row, row)
            del self._items[row]
            self.endRemoveRows()

    def changed(self, key: Any) -> None:
        """Tell the views that the item with ``key`` changed in place."""
        row = self.row_of(key)
        if row is not None:
            idx = self.index(row)
            self.dataChanged.emit(idx, idx)

    def upsert(self, item: T) -> None:
        row = self.row_of(self._key(item))
        if row is None:
            self.append(item)
        else:
            self._items[row] = item
            idx = self.index(row)
            self.dataChanged.emit(idx, idx)


class ConversationListModel(ObjectListModel[Conversation]):
    def __init__(self) -> None:
        super().__init__(lambda c: c.title, lambda c: c.id)


class MessageListModel(ObjectListModel[Message]):
    def __init__(self) -> None:
        super().__init__(lambda m: m.content, lambda m: m.id)


def _size(n: int | None) -> str:
    if not n:
        return ""
    x: float = n
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if x < 1000 or unit == "TB":
            return f"{x:.0f} {unit}" if unit in ("B", "KB") else f"{x:.1f} {unit}"
        x /= 1000
    return ""


def format_size(n: int | None) -> str:
    """Bytes as a short decimal size: ``95.3 MB``."""
    return _size(n)


def _catalog_text(e: CatalogModel) -> str:
    parts = [e.name]
    if e.default_quant:
        parts.append(e.default_quant)
    if e.size:
        parts.append(format_size(e.size))
    parts += list(e.modalities)  # reads images / audio
    return " · ".join(parts)


class CatalogListModel(ObjectListModel[CatalogModel]):
    """Catalog entries (``GET /hearth/catalog``, parsed), filtered by a search string."""

    def __init__(self) -> None:
        super().__init__(_catalog_text, lambda e: e.id)
        self._all: list[CatalogModel] = []
        self._query = ""

    def set_entries(self, entries: list[CatalogModel]) -> None:
        self._all = list(entries)
        self._apply()

    def set_query(self, query: str) -> None:
        self._query = query.strip().lower()
        self._apply()

    def all_entries(self) -> list[CatalogModel]:
        """Every entry, whatever the search shows."""
        return list(self._all)

    def has_entries(self) -> bool:
        """The catalog came (an empty list then means nothing matched the search)."""
        return bool(self._all)

    def _apply(self) -> None:
        q = self._query
        self.reset([e for e in self._all if not q or e.matches(q)])


class DownloadListModel(ObjectListModel[dict]):
    def __init__(self) -> None:
        super().__init__(lambda d: f"{d.get('model', '?')} {d.get('state', '')}", lambda d: d.get("id"))


class LocalModelListModel(ObjectListModel[LocalModel]):
    def __init__(self) -> None:
        super().__init__(lambda m: m.name, lambda m: m.id)
