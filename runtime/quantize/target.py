"""What ``--to`` asks for: a stock mix by name, a file size, or bits per weight."""

from __future__ import annotations

import re
from dataclasses import dataclass

from runtime.quantize.types import STOCK_BPW, STOCK_MIXES

_UNITS = {"b": 1, "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3,
          "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3}


class BadTarget(ValueError):
    pass


@dataclass(slots=True)
class Target:
    stock: str | None = None  #: a stock mix: the size of its file is the budget
    size: int | None = None  #: bytes of the whole file
    bpw: float | None = None  #: bits per weight of the quantized matrices

    def budget(self, n_weights: int, fixed_bytes: int, stock_size: int | None = None) -> int:
        """Bytes the quantized matrices may take."""
        if self.stock is not None:
            if stock_size is None:
                raise ValueError("the stock mix's size is measured first")
            return stock_size - fixed_bytes
        if self.size is not None:
            return self.size - fixed_bytes
        assert self.bpw is not None  # a target is a stock mix, a size or bits per weight (parse_target)
        return int(self.bpw * n_weights / 8)

    def nearest_stock(self, n_weights: int, fixed_bytes: int) -> str:
        """The stock mix to compare with: this one, or the one nominally nearest in bits."""
        if self.stock is not None:
            return self.stock
        bpw = self.budget(n_weights, fixed_bytes) * 8 / n_weights
        return min(STOCK_BPW, key=lambda m: abs(STOCK_BPW[m] - bpw))

    def label(self) -> str:
        if self.stock is not None:
            return self.stock
        if self.size is not None:
            return f"{self.size / 1e6:.0f}MB"
        return f"{self.bpw:g}bpw"


def parse_target(text: str) -> Target:
    t = text.strip()
    if t.upper() in STOCK_MIXES:
        return Target(stock=t.upper())
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*bpw", t, re.IGNORECASE)
    if m:
        bpw = float(m.group(1))
        if not 1.5 <= bpw <= 16:
            raise BadTarget(f"{t}: bits per weight between 1.5 and 16")
        return Target(bpw=bpw)
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*([kmg]i?b|b)", t, re.IGNORECASE)
    if m:
        return Target(size=int(float(m.group(1)) * _UNITS[m.group(2).lower()]))
    raise BadTarget(f"{t!r} is not a size (900MB, 1.2GB), bits per weight (4.5bpw) or a mix "
                    f"({', '.join(STOCK_MIXES)})")
