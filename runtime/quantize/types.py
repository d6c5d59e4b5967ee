"""The ggml quantization types Hearth chooses among, and llama.cpp's stock mixes.

Type ids follow ``enum ggml_type`` (ggml.h); bits per weight follow from the block layout
(``GGML_QUANT_SIZES``: elements per block, bytes per block). A type fits a tensor only when
its block divides the row length: SmolLM2's 576-wide and Gemma 3's 640-wide rows take the
32-element types but none of the 256-element K-quants.
"""

from __future__ import annotations

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

#: candidates for a matrix, cheapest first by bits per weight
CANDIDATES = ("Q2_K", "Q3_K", "IQ4_XS", "IQ4_NL", "Q4_K", "Q5_0", "Q5_K", "Q5_1", "Q6_K", "Q8_0")

#: llama.cpp's stock mixes (``llama-quantize`` names) that ``--to`` accepts
STOCK_MIXES = ("Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "IQ4_NL", "IQ4_XS", "Q4_0", "Q4_1", "Q4_K_S",
               "Q4_K_M", "Q5_0", "Q5_1", "Q5_K_S", "Q5_K_M", "Q6_K", "Q8_0")

#: nominal bits per weight of the stock mixes on a 7B llama (llama-quantize's table), used to pick
#: the stock mix nearest a size target before it is measured
STOCK_BPW = {"Q2_K": 2.96, "Q3_K_S": 3.50, "Q3_K_M": 3.91, "Q3_K_L": 4.27, "IQ4_XS": 4.25,
             "IQ4_NL": 4.50, "Q4_0": 4.34, "Q4_1": 4.78, "Q4_K_S": 4.58, "Q4_K_M": 4.89,
             "Q5_0": 5.21, "Q5_1": 5.65, "Q5_K_S": 5.54, "Q5_K_M": 5.70, "Q6_K": 6.56, "Q8_0": 8.50}


def type_id(name: str) -> int:
    return int(GGMLQuantizationType[name.upper()])


def type_name(type_id: int) -> str:
    return GGMLQuantizationType(type_id).name


def block(name: str) -> tuple[int, int]:
    """(elements, bytes) of one block of type ``name``."""
    return GGML_QUANT_SIZES[GGMLQuantizationType[name.upper()]]


def bits_per_weight(name: str) -> float:
    n, b = block(name)
    return 8.0 * b / n


def fits(name: str, row: int) -> bool:
    return row % block(name)[0] == 0


def tensor_bytes(name: str, shape: tuple[int, ...]) -> int:
    """Bytes of a tensor of ``shape`` (row length first, as ggml counts) in type ``name``."""
    n, b = block(name)
    elements = 1
    for d in shape:
        elements *= int(d)
    return elements // n * b


def candidates_for(row: int) -> list[str]:
    return [c for c in CANDIDATES if fits(c, row)]
