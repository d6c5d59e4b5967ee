"""The GGUF header reader on tiny files made with the gguf package, and on broken ones."""

from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter

from runtime.store.gguf_file import InvalidModelFile, read_header


def tiny_gguf(path: Path) -> Path:
    w = GGUFWriter(str(path), "llama")
    w.add_context_length(256)
    w.add_block_count(2)
    w.add_head_count_kv(2)
    w.add_token_list(["<s>", "</s>", "a", "b"])
    w.add_tensor("token_embd.weight", np.ones((4, 8), dtype=np.float32))
    w.add_tensor("output.weight", np.ones((8, 4), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_reads_metadata_and_tensors(tmp_path):
    h = read_header(tiny_gguf(tmp_path / "t.gguf"))
    assert h.architecture == "llama"
    assert h.arch_value("context_length") == 256
    assert h.arch_value("block_count") == 2
    sizes = {t.name: t.n_bytes for t in h.tensors}
    assert sizes == {"token_embd.weight": 4 * 8 * 4, "output.weight": 8 * 4 * 2}
    assert h.data_offset % 32 == 0


def test_truncated_file_is_refused_with_sizes(tmp_path):
    p = tiny_gguf(tmp_path / "t.gguf")
    data = p.read_bytes()
    p.write_bytes(data[:-10])
    with pytest.raises(InvalidModelFile, match="truncated"):
        read_header(p)


def test_file_cut_inside_header_is_refused(tmp_path):
    p = tiny_gguf(tmp_path / "t.gguf")
    p.write_bytes(p.read_bytes()[:60])
    with pytest.raises(InvalidModelFile, match="truncated"):
        read_header(p)


def test_not_a_gguf_file_is_refused(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    with pytest.raises(InvalidModelFile, match="not a GGUF"):
        read_header(p)


def test_embedded_model_header(smollm2_path):
    h = read_header(smollm2_path)
    assert h.architecture == "llama"
    assert h.arch_value("attention.head_count_kv") == 3


def test_the_type_table_is_ggml_s():
    from gguf.constants import GGML_QUANT_SIZES

    from runtime.store.ggml_types import QUANT_SIZES

    assert QUANT_SIZES == {int(k): v for k, v in GGML_QUANT_SIZES.items()}
