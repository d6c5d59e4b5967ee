"""How much each tensor's output changes when it is quantized lower, on the calibration text.

Two measurements, combined:

* **At the tensor** (every tensor, every candidate type): ggml quantizes a sample of the
  tensor's rows with the importance matrix, dequantizes them, and the error of the output
  ``W x`` over the calibration activations is ``sum_ij imp_j (W - Q(W))_ij^2`` (``imp_j`` the
  mean of ``x_j^2``: the input covariance's diagonal), relative to ``sum_ij imp_j W_ij^2``.
* **At the logits** (one probe per role: ``attn_q``, ``ffn_down``, ``token_embd``, ...):
  only that role's tensors go to their lowest candidate, everything else near-lossless
  (Q8_0), and the KL divergence to the source on the calibration text is measured. Its ratio
  to the role's summed tensor errors is the role's gain: how much an output error there costs
  in the model's next-token distribution.

A tensor's expected cost at a type is ``gain[role] * error[type]``; ``allocation`` spends the
bytes where that falls fastest.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from runtime.backends.ggml_base import dequantize_rows, quantize_rows
from runtime.backends.quantize import QuantizeSpec, quantize_model
from runtime.quantize.allocation import Option
from runtime.quantize.imatrix_file import Importance
from runtime.quantize.quality import Reference
from runtime.quantize.types import candidates_for, tensor_bytes, type_id
from runtime.quantize.weights import SourceWeights

HIGH = "Q8_0"  #: what the other tensors are while one role is probed
SAMPLE_ROWS = 128


def role(name: str) -> str:
    return re.sub(r"^blk\.\d+\.", "", name)


def tensor_errors(weights: SourceWeights, importance: Importance | None, name: str,
                  sample_rows: int = SAMPLE_ROWS, seed: int = 0) -> dict[str, float]:
    """Relative output error of tensor ``name`` per candidate type, on a row sample."""
    info = next(i for i in weights.matrices if i.name == name)
    row, n_rows = info.shape[0], int(np.prod(info.shape[1:]))
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(n_rows, size=min(sample_rows, n_rows), replace=False))
    w = weights.rows(name, pick)
    imp = importance.mean(name) if importance is not None else None
    weight = imp if imp is not None and imp.size == row else np.ones(row, dtype=np.float32)
    signal = float(np.einsum("ij,j->", w.astype(np.float64) ** 2, weight))
    out = {}
    for t in candidates_for(row):
        q = dequantize_rows(type_id(t), quantize_rows(type_id(t), w, weight if imp is not None else None), row)
        out[t] = float(np.einsum("ij,j->", (w - q).astype(np.float64) ** 2, weight)) / max(signal, 1e-30)
    return out


@dataclass(slots=True)
class Sensitivity:
    errors: dict[str, dict[str, float]]  #: tensor -> type -> relative output error
    gains: dict[str, float]  #: role -> KL per unit of summed relative error
    probe_kl: dict[str, float]  #: role -> KL with only that role lowered
    base_kl: float  #: KL with everything at HIGH

    def to_dict(self) -> dict:
        return {"errors": self.errors, "gains": self.gains, "probe_kl": self.probe_kl, "base_kl": self.base_kl}

    @classmethod
    def from_dict(cls, d: dict) -> Sensitivity:
        return cls(d["errors"], d["gains"], d["probe_kl"], d["base_kl"])

    def options(self, weights: SourceWeights) -> dict[str, list[Option]]:
        out = {}
        for info in weights.matrices:
            g = self.gains.get(role(info.name), 0.0)
            out[info.name] = [Option(t, tensor_bytes(t, info.shape), g * e)
                              for t, e in self.errors[info.name].items()]
        return out


def measure(weights: SourceWeights, importance: Importance | None, reference: Reference,
            threads: int = 0, on_step: Callable[[str, int, int], None] | None = None) -> Sensitivity:
    """Tensor errors for every matrix, then one logits probe per role (see the module doc)."""
    mats = weights.matrices
    errors = {}
    for i, info in enumerate(mats):
        errors[info.name] = tensor_errors(weights, importance, info.name)
        if on_step:
            on_step("tensor errors", i + 1, len(mats))
    roles = sorted({role(m.name) for m in mats})
    imp = _importance_means(importance)
    high = {m.name: type_id(HIGH) for m in mats if HIGH in errors[m.name]}
    probe_kl = {}
    with tempfile.TemporaryDirectory(prefix="hearth-probe-") as tmp:
        probe = Path(tmp) / "probe.gguf"
        quantize_model(weights.path, probe, QuantizeSpec(HIGH, dict(high), imp, threads))
        base_kl = reference.measure(probe).kl_mean
        for i, r in enumerate(roles):
            lowered = dict(high)
            for m in mats:
                if role(m.name) == r:
                    lowered[m.name] = type_id(next(iter(errors[m.name])))  # its cheapest candidate
            quantize_model(weights.path, probe, QuantizeSpec(HIGH, lowered, imp, threads))
            probe_kl[r] = reference.measure(probe).kl_mean
            if on_step:
                on_step("role probes", i + 1, len(roles))
    gains = {}
    for r in roles:
        summed = sum(next(iter(errors[m.name].values())) for m in mats if role(m.name) == r)
        gains[r] = max(probe_kl[r] - base_kl, 1e-9) / max(summed, 1e-30)
    return Sensitivity(errors, gains, probe_kl, base_kl)


def _importance_means(importance: Importance | None) -> dict[str, np.ndarray]:
    if importance is None:
        return {}
    return {n: m for n in importance.sums if (m := importance.mean(n)) is not None}
