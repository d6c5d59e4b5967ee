"""GPTQ and AWQ checkpoints written with numpy in their documented packings, imported to GGUF."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader
from gguf.quants import dequantize

from runtime.backends.token_logits import ChunkScorer
from runtime.quantize.hf_import import import_checkpoint, permute_rope
from runtime.quantize.hf_int4 import dequantize_awq, dequantize_gptq

HIDDEN, FF, LAYERS, HEADS, KV_HEADS, GROUP = 64, 128, 2, 4, 2, 32
N_VOCAB = 257  # the 256 byte tokens and one merge (llama.cpp wants a merge list)
ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def _bytes_to_unicode() -> list[str]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def _write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    names = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int32): "I32"}
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + b"".join(blobs))


def _pack(vals: np.ndarray, axis_rows: bool, order=tuple(range(8))) -> np.ndarray:
    """Eight 4-bit values per int32, along rows (GPTQ qweight) or columns in ``order``."""
    v = vals.astype(np.uint32) & np.uint32(0xF)
    if axis_rows:
        v = v.reshape(v.shape[0] // 8, 8, v.shape[1]).transpose(0, 2, 1)  # [rows/8, cols, 8]
    else:
        v = v.reshape(v.shape[0], v.shape[1] // 8, 8)[..., list(order)]
    words = np.zeros(v.shape[:-1], dtype=np.uint32)
    for k in range(8):
        words |= v[..., k] << np.uint32(4 * k)
    return words.view(np.int32)


def _layer(rng, n_in: int, n_out: int, method: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Packed tensors of one linear layer and its float weight [out, in] by the formula."""
    q = rng.integers(0, 16, size=(n_in, n_out))
    # GPTQ's v1 format stores zero - 1 in four bits: a zero of 0 cannot be written, so it has none
    z = rng.integers(1 if method == "gptq" else 0, 16, size=(n_in // GROUP, n_out))
    s = (rng.random((n_in // GROUP, n_out)) * 0.02 + 0.005).astype(np.float16)
    g = np.arange(n_in) // GROUP
    weight = (s[g].astype(np.float32) * (q - z[g]).astype(np.float32)).T
    if method == "gptq":
        packed = {"qweight": _pack(q, True), "qzeros": _pack(z - 1, False), "scales": s,
                  "g_idx": g.astype(np.int32)}
    else:
        packed = {"qweight": _pack(q, False, ORDER), "qzeros": _pack(z, False, ORDER), "scales": s}
    return packed, weight


def _checkpoint(folder: Path, method: str, packed: bool, seed: int = 0) -> dict[str, np.ndarray]:
    """A tiny llama checkpoint in ``method``'s packing, or (``packed`` False) its float weights."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    hd = HIDDEN // HEADS
    tensors: dict[str, np.ndarray] = {"model.embed_tokens.weight": rng.normal(0, 1, (N_VOCAB, HIDDEN)).astype(np.float16),
                                      "model.norm.weight": np.ones(HIDDEN, np.float32),
                                      "lm_head.weight": rng.normal(0, 0.1, (N_VOCAB, HIDDEN)).astype(np.float16)}
    reference = dict(tensors)
    shapes = {"self_attn.q_proj": (HIDDEN, HEADS * hd), "self_attn.k_proj": (HIDDEN, KV_HEADS * hd),
              "self_attn.v_proj": (HIDDEN, KV_HEADS * hd), "self_attn.o_proj": (HEADS * hd, HIDDEN),
              "mlp.gate_proj": (HIDDEN, FF), "mlp.up_proj": (HIDDEN, FF), "mlp.down_proj": (FF, HIDDEN)}
    for il in range(LAYERS):
        p = f"model.layers.{il}."
        for norm in ("input_layernorm", "post_attention_layernorm"):
            tensors[p + norm + ".weight"] = reference[p + norm + ".weight"] = np.ones(HIDDEN, np.float32)
        for name, (n_in, n_out) in shapes.items():
            layer, weight = _layer(rng, n_in, n_out, method)
            reference[p + name + ".weight"] = weight
            for k, v in layer.items():
                tensors[f"{p}{name}.{k}"] = v
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
              "intermediate_size": FF, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
              "num_key_value_heads": KV_HEADS, "rms_norm_eps": 1e-5, "vocab_size": N_VOCAB,
              "max_position_embeddings": 512, "bos_token_id": 0, "eos_token_id": 1}
    if packed:
        config["quantization_config"] = {"quant_method": method, "bits": 4, "group_size": GROUP,
                                         "version": "gemm", "desc_act": False}
    (folder / "config.json").write_text(json.dumps(config))
    vocab = {ch: i for i, ch in enumerate(_bytes_to_unicode())} | {"Ġt": 256}
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": vocab, "merges": ["Ġ t"]},
                                                       "added_tokens": []}))
    _write_safetensors(folder / "model.safetensors", tensors if packed else reference)
    return reference


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_dequantized_weights_follow_the_documented_formula(method, tmp_path):
    rng = np.random.default_rng(5)
    packed, weight = _layer(rng, 64, 96, method)
    if method == "gptq":
        got = dequantize_gptq(packed["qweight"], packed["qzeros"], packed["scales"], packed["g_idx"], GROUP)
    else:
        got = dequantize_awq(packed["qweight"], packed["qzeros"], packed["scales"], GROUP)
    np.testing.assert_array_equal(got, weight)


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_an_imported_checkpoint_runs_like_its_float_reference(method, tmp_path):
    ref = _checkpoint(tmp_path / "ref", method, packed=False)
    _checkpoint(tmp_path / method, method, packed=True)
    ref_gguf = import_checkpoint(tmp_path / "ref", tmp_path / "ref.gguf")
    q_gguf = import_checkpoint(tmp_path / method, tmp_path / f"{method}.gguf")
    tensors = {t.name: t for t in GGUFReader(str(q_gguf)).tensors}
    down = tensors["blk.1.ffn_down.weight"]
    assert down.tensor_type.name == "Q4_1"  # 4-bit where the checkpoint was 4-bit
    np.testing.assert_allclose(dequantize(down.data, down.tensor_type).reshape(HIDDEN, FF),
                               ref["model.layers.1.mlp.down_proj.weight"], atol=2e-3)
    k = tensors["blk.0.attn_k.weight"]
    np.testing.assert_allclose(dequantize(k.data, k.tensor_type).reshape(KV_HEADS * HIDDEN // HEADS, HIDDEN),
                               permute_rope(ref["model.layers.0.self_attn.k_proj.weight"], KV_HEADS), atol=2e-3)
    tokens = list(np.random.default_rng(2).integers(2, 256, size=24))
    with ChunkScorer(ref_gguf, 32, threads=2) as a, ChunkScorer(q_gguf, 32, threads=2) as b:
        want, got = a.logits(tokens), b.logits(tokens)
    assert np.isfinite(got).all() and want.std() > 0.1
    np.testing.assert_allclose(got, want, atol=0.05 * float(np.abs(want).max()))
    assert (got.argmax(-1) == want.argmax(-1)).mean() > 0.9


def test_the_convert_command_registers_the_gguf(tmp_path, data_dir, capsys):
    from runtime.cli import main
    from runtime.store.registry import Registry

    _checkpoint(tmp_path / "tiny-awq", "awq", packed=True)
    assert main(["convert", str(tmp_path / "tiny-awq")]) == 0
    model_id = capsys.readouterr().out.split("registered as ")[1].strip()
    assert Registry(data_dir).find(model_id).path == str((tmp_path / "tiny-awq" / "tiny-awq.gguf").resolve())
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text(json.dumps({"architectures": ["BertModel"]}))
    assert main(["convert", str(tmp_path / "bad")]) == 1


def _raw_safetensors(path: Path, header: dict, body: bytes) -> Path:
    head = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(head)) + head + body)
    return path


@pytest.mark.parametrize("meta", [
    {"dtype": "F32", "shape": [-1], "data_offsets": [0, 16]},  # numpy would take -1 as "whatever is there"
    {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 16]},  # 24 bytes of shape, 16 of data
    {"dtype": "F32", "shape": [1 << 40], "data_offsets": [0, 1 << 42]},  # past the file
    {"dtype": "F32", "shape": [4], "data_offsets": [8, 4]},
    {"dtype": "F32", "shape": [4], "data_offsets": "0-16"},
    {"dtype": "Q4", "shape": [4], "data_offsets": [0, 16]},
    "not an object",
])
def test_a_safetensors_header_that_does_not_add_up_is_refused(tmp_path, meta):
    from runtime.quantize.safetensors_file import BadSafetensors, read_safetensors

    path = _raw_safetensors(tmp_path / "x.safetensors", {"w": meta}, bytes(16))
    with pytest.raises(BadSafetensors):
        read_safetensors(path)


def test_a_packed_layer_whose_tensors_do_not_fit_together_is_refused_before_unpacking(tmp_path):
    from runtime.quantize.hf_int4 import UnsupportedQuantization

    _checkpoint(tmp_path / "ck", "gptq", packed=True)
    from runtime.quantize.safetensors_file import read_safetensors

    tensors = {k: np.array(v) for k, v in read_safetensors(tmp_path / "ck" / "model.safetensors").items()}
    base = "model.layers.0.mlp.up_proj."
    for name, value in ((base + "qzeros", np.zeros((1, 4), np.int32)),  # one group where two are
                        (base + "g_idx", np.full(HIDDEN, 7, np.int32))):  # groups that do not exist
        broken = tensors | {name: value}
        _write_safetensors(tmp_path / "ck" / "model.safetensors", broken)
        with pytest.raises(UnsupportedQuantization, match="up_proj"):
            import_checkpoint(tmp_path / "ck", tmp_path / "out.gguf")
