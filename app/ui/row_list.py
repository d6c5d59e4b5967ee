"""A scrolling column of row widgets bound to an ``ObjectListModel``: one widget per item."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar, cast

from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QVBoxLayout, QWidget

from app.qt_models import ObjectListModel

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class ItemRow(Protocol[T_contra]):
    """What a row widget has besides being a widget: it shows an item again when it changes."""

    def update_item(self, item: T_contra, /) -> None: ...


class RowList(QScrollArea, Generic[T]):
    """``make(item)`` builds a row widget that has ``update_item(item)`` (an ``ItemRow``); rows
    follow the model."""

    def __init__(self, model: ObjectListModel[T], make: Callable[[T], QWidget], empty: str,
                 no_match: Callable[[], str] | None = None) -> None:
        """``no_match``: the words for an empty list while a search is on (None: ``empty``)."""
        super().__init__()
        self.model, self.make = model, make
        self._empty, self._no_match = empty, no_match
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        inner = QWidget()
        self.column = QVBoxLayout(inner)
        self.column.setContentsMargins(4, 4, 4, 4)
        self.column.setSpacing(0)
        self.empty = QLabel(empty)
        self.empty.setObjectName("emptyState")
        self.empty.setWordWrap(True)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.column.addWidget(self.empty)
        self.column.addStretch(1)
        self.setWidget(inner)
        self.rows: list[QWidget] = []
        model.modelReset.connect(self._rebuild)
        model.rowsInserted.connect(self._inserted)
        model.rowsRemoved.connect(self._removed)
        model.dataChanged.connect(self._changed)
        self._rebuild()

    def _rebuild(self) -> None:
        for w in self.rows:
            self.column.removeWidget(w)
            w.deleteLater()
        self.rows = []
        self._inserted(QModelIndex(), 0, self.model.rowCount() - 1)

    def _inserted(self, parent: QModelIndex, first: int, last: int) -> None:
        for row in range(first, last + 1):
            w = self.make(self.model.item(row))
            self.column.insertWidget(row + 1, w)
            self.rows.insert(row, w)
        self._show_empty()

    def _show_empty(self) -> None:
        searching = self._no_match() if self._no_match is not None else ""
        self.empty.setText(searching or self._empty)
        self.empty.setVisible(not self.rows)

    def _removed(self, parent: QModelIndex, first: int, last: int) -> None:
        for w in self.rows[first:last + 1]:
            self.column.removeWidget(w)
            w.deleteLater()
        del self.rows[first:last + 1]
        self._show_empty()

    def _changed(self, top: QModelIndex, bottom: QModelIndex) -> None:
        for row in range(top.row(), bottom.row() + 1):
            if row < len(self.rows):
                cast("ItemRow[T]", self.rows[row]).update_item(self.model.item(row))
