"""A mixture-of-experts model's experts: how many, how many a token reads, and their bytes.

In a MoE layer the feed-forward network is ``count`` routed experts, of which a router picks
``used`` for each token (Qwen3-30B-A3B: 8 of 128; gpt-oss-20b: 4 of 32), beside ``shared``
experts that every token runs. Memory holds all of them; one decoded token reads only the
chosen ones, ``used / count`` of the routed expert tensors. Qwen3-30B-A3B has 30.5B
parameters and reads about 3.3B per token, so its decode speed is that of a 3B dense model
wherever its experts sit.

The routed experts are the tensors llama.cpp's ``--cpu-moe`` / ``--n-cpu-moe`` match
(``runtime.store.gguf_file.EXPERT_TENSORS``: ``blk.N.ffn_{up,down,gate,gate_up}_exps`` with
their biases and scales). Moving them to host memory keeps the attention, the router, the
shared experts and the KV cache on the GPU, which is how a model larger than the GPU runs
fastest: the CPU reads the few active experts per token, the GPU everything else.

Measured here (2 cores, other work running): a 2.5 GB F16 ``qwen3moe`` file with 4 of 64
experts used (223 MB read per token, 1.2B weights of which 0.11B active) decoded at up to 13
tokens/s, where reading every weight could not pass 3.1 (7.7 GB/s copy bandwidth); a dense
file of the same bytes per token, at up to 22.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtime.store.gguf_file import EXPERT_TENSORS

if TYPE_CHECKING:
    from runtime.store.gguf_file import TensorInfo

_EXPERT = re.compile(EXPERT_TENSORS)


@dataclass(slots=True)
class Experts:
    """The routed experts of a MoE model (``ModelShape.experts``)."""

    count: int  #: routed experts in a MoE layer (``{arch}.expert_count``)
    used: int  #: routed experts each token reads (``{arch}.expert_used_count``)
    shared: int  #: experts every token reads, counted with the layer's other weights
    layer_bytes: tuple[int, ...]  #: per layer: bytes of its routed expert tensors (0: a dense layer)
    params: int  #: weights of all routed expert tensors
    ff: int = 0  #: one expert's feed-forward width (0: not known)

    @property
    def fraction(self) -> float:
        """The share of the routed experts' bytes one token reads."""
        return min(self.used / self.count, 1.0) if self.count else 1.0

    @property
    def total_bytes(self) -> int:
        return sum(self.layer_bytes)

    def unread_bytes(self, layer: int) -> float:
        """Bytes of ``layer``'s experts that one decoded token does not read."""
        return self.layer_bytes[layer] * (1 - self.fraction) if layer < len(self.layer_bytes) else 0.0

    def to_dict(self) -> dict:
        return {"experts": self.count, "experts_used": self.used, "shared_experts": self.shared,
                "expert_bytes": self.total_bytes, "expert_ff": self.ff,
                "moe_layers": sum(1 for b in self.layer_bytes if b)}


def is_expert_tensor(name: str) -> bool:
    """Whether a GGUF tensor is one of a layer's routed experts."""
    return _EXPERT.search(name) is not None


def expert_tally(tensors: list[TensorInfo], n_layer: int) -> tuple[list[int], int]:
    """Bytes of the routed expert tensors per layer, and their weights in all."""
    per_layer = [0] * n_layer
    params = 0
    for t in tensors:
        if not is_expert_tensor(t.name):
            continue
        parts = t.name.split(".")
        if parts[0] == "blk" and parts[1].isascii() and parts[1].isdigit() and int(parts[1]) < n_layer:
            per_layer[int(parts[1])] += t.n_bytes
            n = 1
            for d in t.shape:
                n *= d
            params += n
    return per_layer, params


def expert_params(n_embd: int, count: int, shared: int, ff: int, matrices: int = 3) -> tuple[int, int]:
    """Weights per layer of the routed experts and of the shared ones with the router, for a model
    sized from catalog numbers; ``matrices``: 3 for a gated expert (gate, up, down), 2 for one
    without a gate (up, down: Nemotron-H's squared ReLU)."""
    return matrices * n_embd * ff * count, matrices * n_embd * ff * shared + n_embd * count


def derive_ff(per_layer: float, attention: int, n_embd: int, count: int, shared: int, matrices: int = 3) -> int:
    """One expert's feed-forward width from a MoE layer's weights less its attention."""
    return max(int((per_layer - attention - n_embd * count) / (matrices * n_embd * (count + shared))), 1)
