"""What a GGUF file's name says: its quantization and, for a split model, its part number.

Conventions of the files on the hub: ``Llama-3.2-1B-Instruct-Q4_K_M.gguf``,
``qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf`` (llama.cpp's ``gguf-split``: the first
part carries the metadata, llama.cpp loads the rest from the first part's name).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_QUANT = re.compile(
    r"(?<![A-Za-z0-9])((?:UD-)?(?:I?Q\d(?:_[A-Z0-9]+)*|TQ\d_\d|MXFP4(?:_MOE)?|BF16|F16|F32))(?![A-Za-z0-9])",
    re.IGNORECASE,
)
#: quantizations chosen, in this order, when a reference names none
PREFERRED_QUANTS = ("Q4_K_M", "Q4_K_S", "Q4_0", "Q5_K_M", "Q4_1", "Q6_K", "Q8_0")
#: typical bits per weight of a whole llama.cpp file of each quantization (llama.cpp's
#: quantize table: mixtures keep some tensors at higher precision)
BITS_PER_WEIGHT = {
    "Q2_K": 2.96, "Q3_K_S": 3.5, "Q3_K_M": 3.91, "Q3_K_L": 4.27, "IQ4_XS": 4.46, "Q4_0": 4.55,
    "IQ4_NL": 4.68, "Q4_1": 5.0, "Q4_K_S": 4.58, "Q4_K_M": 4.89, "Q5_0": 5.54, "Q5_1": 6.0,
    "Q5_K_S": 5.54, "Q5_K_M": 5.7, "Q6_K": 6.56, "Q8_0": 8.5, "F16": 16.0, "BF16": 16.0, "F32": 32.0,
}


@dataclass(slots=True, frozen=True)
class SplitPart:
    index: int  #: 1-based
    count: int
    prefix: str  #: the name before ``-0000i-of-0000n.gguf``

    def name(self, index: int) -> str:
        return f"{self.prefix}-{index:05d}-of-{self.count:05d}.gguf"

    def names(self) -> list[str]:
        return [self.name(i) for i in range(1, self.count + 1)]


def split_part(filename: str) -> SplitPart | None:
    m = _SPLIT.search(filename)
    if m is None or int(m.group(2)) < 1:
        return None
    return SplitPart(int(m.group(1)), int(m.group(2)), filename[:m.start()])


def quant_of(filename: str) -> str | None:
    """The quantization a file name states (upper case, e.g. ``Q4_K_M``), or None."""
    base = filename.rsplit("/", 1)[-1]
    part = split_part(base)
    stem = part.prefix if part else re.sub(r"\.gguf$", "", base, flags=re.IGNORECASE)
    found = _QUANT.findall(stem)
    return found[-1].upper() if found else None


def is_gguf(filename: str) -> bool:
    return filename.lower().endswith(".gguf")


def is_auxiliary(filename: str) -> bool:
    """Files that sit beside a model but are not one (vision projectors, imatrix data)."""
    base = filename.rsplit("/", 1)[-1].lower()
    return base.startswith(("mmproj", "imatrix")) or "mmproj" in base
