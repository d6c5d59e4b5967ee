"""The numbers of a model that decide its memory: ``ModelShape``, from a GGUF header or a catalog.

From a downloaded file, everything comes from the header (``read_header``: metadata and
per-tensor byte sizes; no weights are read). For a model that is not downloaded, the same
shape is built from the catalog's architecture numbers and the file size
(``runtime.hardware.catalog_shape``).

Sliding-window attention: a layer that uses it needs only ``window`` cells per sequence
(when llama.cpp is not told to keep full-size SWA caches). Which layers use it comes from
``{arch}.attention.sliding_window_pattern`` when the file has it (an integer n: every n-th
layer is global, the n-1 before it sliding, as llama.cpp's ``set_swa_pattern``; or one bool
per layer). Without that key, the pattern llama.cpp hard-codes for the architecture is used
(gemma3: 5 sliding then 1 global); for an architecture not in that table every layer is
counted as global, which can only over-estimate the KV cache.

Recurrent state (Mamba, Mamba-2, RWKV, and the recurrent layers of hybrids): one state per
sequence and layer that does not grow with the context, sized as llama.cpp's
``n_embd_r + n_embd_s`` floats (f32): the convolution (or token-shift) state and the SSM (or
WKV) state. In a hybrid, the recurrent layers are those with no KV heads.

Mixture of experts: ``{arch}.expert_count``, ``expert_used_count`` and ``expert_shared_count``
with the bytes of each layer's routed expert tensors (``runtime.hardware.experts``) give
``ModelShape.experts``; memory counts every expert, decode reads the used ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import SupportsInt, cast

from runtime.hardware.experts import Experts, expert_tally
from runtime.store.gguf_file import SHAPE_BOUNDS as BOUNDS
from runtime.store.gguf_file import GGUFHeader, InvalidModelFile, read_header

#: llama.cpp's built-in SWA period per architecture (llama-model.cpp ``set_swa_pattern``)
SWA_PATTERNS = {"gemma2": 2, "gemma3": 6, "cohere2": 4, "exaone4": 4, "gpt-oss": 2}
_INPUT_TENSORS = ("token_embd.", "token_embd_norm.", "position_embd.", "token_types.",
                  "per_layer_token_embd.")


def _brief(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class ModelShapeError(InvalidModelFile):
    """The header (or catalog entry) lacks a number the planner needs."""


@dataclass(slots=True)
class ModelShape:
    name: str
    architecture: str
    n_layer: int
    n_head: int
    n_head_kv: tuple[int, ...]  #: per layer
    head_dim_k: int
    head_dim_v: int
    n_embd: int
    n_ff: int
    n_vocab: int
    ctx_train: int
    sliding_window: int  #: 0: no sliding-window attention
    swa_layers: tuple[bool, ...]  #: per layer: True when the layer uses the sliding window
    layer_bytes: tuple[int, ...]  #: weights of each repeating layer (``blk.N.*``)
    input_bytes: int  #: token embeddings: llama.cpp always keeps them on the CPU
    output_bytes: int  #: output norm and output matrix (without the embedding when tied)
    tied_output: bool  #: the output matrix is the token embedding matrix
    n_params: int
    file_bytes: int
    source: str  #: gguf | catalog
    path: str | None = None
    swa_assumed: bool = False  #: True when the SWA layers come from the architecture table
    #: per layer: bytes of one sequence's recurrent state (0: an attention layer)
    state_bytes: tuple[int, ...] = ()
    #: the multimodal projector loaded beside the model (``mmproj``): its file's bytes, 0 when
    #: the catalog does not list its size; None: no projector (text only)
    projector_bytes: int | None = None
    #: the matrices llama.cpp may repack for the CPU (``runtime.hardware.repack``): (layer, or
    #: ``n_layer`` for the output layer; ggml type; rows ``ne[1]``; bytes); empty for a catalog shape
    matmuls: tuple[tuple[int, int, int, int], ...] = ()
    #: the routed experts of a mixture-of-experts model; None: a dense model
    experts: Experts | None = None

    def repack_bytes(self, rules: dict[int, int], layers: list[int] | range, output: bool) -> int:
        """Bytes llama.cpp's CPU backend keeps a repacked copy of (``rules``:
        ``runtime.hardware.repack.repack_rules``), of ``layers`` and, with ``output``, the output
        layer: the layers the CPU computes."""
        if not rules or not self.matmuls:
            return 0
        on_cpu = set(layers) | ({self.n_layer} if output else set())
        return sum(n for layer, ggml_type, rows, n in self.matmuls
                   if layer in on_cpu and ggml_type in rules and rows % rules[ggml_type] == 0)

    @property
    def moe(self) -> bool:
        return self.experts is not None and self.experts.total_bytes > 0

    def expert_bytes(self, layer: int) -> int:
        """Bytes of ``layer``'s routed experts (0 for a dense layer or model)."""
        e = self.experts
        return e.layer_bytes[layer] if e is not None and layer < len(e.layer_bytes) else 0

    def read_bytes(self, layer: int) -> float:
        """Weight bytes of ``layer`` one decoded token reads: all but the experts it does not use."""
        unread = self.experts.unread_bytes(layer) if self.experts is not None else 0.0
        return self.layer_bytes[layer] - unread

    @property
    def active_params(self) -> int:
        """Weights one token uses: all but the routed experts it does not use."""
        e = self.experts
        return self.n_params - int(e.params * (1 - e.fraction)) if e is not None else self.n_params

    @property
    def recurrent(self) -> bool:
        return any(self.state_bytes)

    @property
    def state_bytes_per_seq(self) -> int:
        return sum(self.state_bytes)

    @property
    def weights_bytes(self) -> int:
        return self.input_bytes + sum(self.layer_bytes) + self.output_bytes

    @property
    def output_matrix_bytes(self) -> int:
        """Bytes of the output layer as placed on a device (tied: a copy of the embedding)."""
        return self.output_bytes + (self.input_bytes if self.tied_output else 0)

    @property
    def bits_per_weight(self) -> float:
        return self.weights_bytes * 8 / self.n_params if self.n_params else 0.0

    def kv_bytes_per_cell(self, layer: int, kv_type_bytes: float) -> float:
        """K and V bytes one cell of ``layer`` takes at ``kv_type_bytes`` per element."""
        return self.n_head_kv[layer] * (self.head_dim_k + self.head_dim_v) * kv_type_bytes

    def to_dict(self) -> dict:
        return {
            "name": self.name, "architecture": self.architecture, "n_layer": self.n_layer,
            "n_head": self.n_head, "n_head_kv": max(self.n_head_kv, default=0),
            "head_dim_k": self.head_dim_k, "head_dim_v": self.head_dim_v,
            "n_embd": self.n_embd, "n_ff": self.n_ff, "n_vocab": self.n_vocab,
            "ctx_train": self.ctx_train, "sliding_window": self.sliding_window,
            "swa_layers": sum(self.swa_layers), "weights_bytes": self.weights_bytes,
            "n_params": self.n_params, "bits_per_weight": round(self.bits_per_weight, 2),
            "file_bytes": self.file_bytes, "source": self.source,
            "recurrent_layers": sum(1 for b in self.state_bytes if b),
            "state_bytes_per_seq": self.state_bytes_per_seq,
            "projector_bytes": self.projector_bytes, "active_params": self.active_params,
            **(self.experts.to_dict() if self.experts is not None else {}),
        }


def swa_layers(n_layer: int, window: int, pattern: object, arch: str) -> tuple[tuple[bool, ...], bool]:
    """Which layers use the sliding window, and whether that was assumed from ``arch``."""
    if window <= 0:
        return (False,) * n_layer, False
    if isinstance(pattern, list):
        flags = [bool(x) for x in pattern[:n_layer]]
        return tuple(flags + [False] * (n_layer - len(flags))), False
    assumed = not isinstance(pattern, int)
    period = pattern if isinstance(pattern, int) else SWA_PATTERNS.get(arch, 1)
    # llama.cpp: period 0 = every layer sliding; period n = layers il % n < n - 1 sliding.
    return tuple(period == 0 or il % period < period - 1 for il in range(n_layer)), assumed


def _ints(value: list) -> list[int]:
    """The integers of a header array (a damaged file may hold strings or floats there)."""
    return [int(v) for v in value if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v
            and abs(v) < 1 << 62]


def _per_layer(value: object, n_layer: int, default: int) -> tuple[int, ...]:
    vals = _ints(value[:n_layer]) if isinstance(value, list) else []
    if vals:
        return tuple(vals + [vals[-1]] * (n_layer - len(vals)))
    return (int(value) if isinstance(value, int) else default,) * n_layer


def _largest(value: object, default: int) -> int:
    vals = _ints(value) if isinstance(value, list) else []
    if vals:
        return max(vals)
    return int(value) if isinstance(value, int) else default


class _Keys:
    """Reads ``{arch}.*`` values of a header and names the file in errors."""

    def __init__(self, header: GGUFHeader) -> None:
        self.header = header
        self.file = Path(header.path).name
        arch = header.architecture
        if not arch:
            raise ModelShapeError(
                f"{self.file} has no 'general.architecture' in its header: it is not a "
                "language model file llama.cpp can run; choose another GGUF file"
            )
        self.arch = arch

    def get(self, key: str) -> object | None:
        return self.header.arch_value(key)

    def count(self, key: str, default: int | None = None) -> int:
        """An integer key, required when ``default`` is None, inside ``BOUNDS``."""
        value = self.need(key) if default is None else self.get(key)
        if value is None or value == 0 and default is not None:
            value = default
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelShapeError(f"{self.file}: '{self.arch}.{key}' is {_brief(value)}, not an integer: "
                                  "the header is damaged")
        return self.check(key, value)

    def check(self, key: str, value: int) -> int:
        """``value`` of ``key`` when it lies inside ``BOUNDS`` (a hostile file cannot make the
        planner build a tuple of 2**32 layers)."""
        high = BOUNDS.get(key.rsplit(".", 1)[-1], 1 << 32)
        if not 0 <= value <= high:
            raise ModelShapeError(f"{self.file} declares '{self.arch}.{key}' = {value:,}; Hearth accepts 0 to "
                                  f"{high:,}: the header is damaged or not a model llama.cpp can run")
        return value

    def need(self, key: str) -> object:
        value = self.get(key)
        if value is None or (isinstance(value, list) and not value):
            raise ModelShapeError(
                f"{self.file} has no '{self.arch}.{key}' in its header, which sizing the model "
                "needs: the file is incomplete or was made by a broken converter; download it again"
            )
        return value


def _tensor_groups(header: GGUFHeader, n_layer: int) -> tuple[list[int], int, int, bool, int, list]:
    layers = [0] * n_layer
    input_bytes = output_bytes = n_params = 0
    has_output = False
    matmuls: list[tuple[int, int, int, int]] = []  # what the CPU backend may repack (ModelShape.matmuls)
    for t in header.tensors:
        n_elem = 1
        for d in t.shape:
            n_elem *= d
        n_params += n_elem
        parts = t.name.split(".")
        group = n_layer
        if parts[0] == "blk" and len(parts) > 1 and parts[1].isascii() and parts[1].isdigit() and int(parts[1]) < n_layer:
            group = int(parts[1])
            layers[group] += t.n_bytes
        elif t.name.startswith(_INPUT_TENSORS):
            input_bytes += t.n_bytes
            continue  # looked up, never multiplied
        else:  # output norm, output matrix, and anything llama.cpp loads with the output layer
            output_bytes += t.n_bytes
            has_output |= t.name == "output.weight"
        if len(t.shape) in (2, 3) and t.name.endswith(".weight") and "token_embd" not in t.name:
            matmuls.append((group, t.ggml_type, t.shape[1], t.n_bytes))
    return layers, input_bytes, output_bytes, not has_output, n_params, matmuls


def _experts(k: _Keys, n_layer: int) -> Experts | None:
    """The routed experts the header declares, with their tensors' bytes; None for a dense model."""
    count = k.count("expert_count", 0)
    if not count:
        return None
    used = k.check("expert_used_count", _largest(k.get("expert_used_count"), 0))
    if not 0 < used <= count:
        raise ModelShapeError(f"{k.file} declares {count} experts of which {used} are used per token: "
                              "the header is damaged")
    per_layer, params = expert_tally(k.header.tensors, n_layer)
    return Experts(count=count, used=used, shared=k.count("expert_shared_count", 0),
                   layer_bytes=tuple(per_layer), params=params,
                   ff=k.check("expert_feed_forward_length", _largest(k.get("expert_feed_forward_length"), 0)))


def _int(value: object) -> int:
    """``int(value)`` of a header number; a value of another type raises as ``int()`` does."""
    return int(cast("SupportsInt | str", value))


def _state_floats(k: _Keys, n_embd: int) -> int:
    """llama.cpp's ``n_embd_r() + n_embd_s()`` of a recurrent layer; 0 without recurrent keys."""
    wkv = _int(k.get("wkv.head_size") or 0)
    if wkv:  # RWKV: token shift, WKV state
        return _int(k.get("token_shift_count") or 2) * n_embd + n_embd * wkv
    l_cache = _int(k.get("shortconv.l_cache") or 0)
    if l_cache:  # LFM2's short convolutions
        return n_embd * (l_cache - 1)
    d_state = _int(k.get("ssm.state_size") or 0)
    if not d_state:
        return 0
    d_inner = _int(k.get("ssm.inner_size") or 2 * n_embd)
    d_conv = _int(k.get("ssm.conv_kernel") or 0)
    n_group = _int(k.get("ssm.group_count") or 0)
    return max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state) + d_state * d_inner


def shape_from_header(header: GGUFHeader) -> ModelShape:
    """The shape of a model from its parsed GGUF header (numbers outside ``BOUNDS`` refused)."""
    k = _Keys(header)
    n_layer = k.count("block_count")
    n_embd = k.count("embedding_length")
    state = _state_floats(k, n_embd)
    n_head = _largest(k.get("attention.head_count") if state else k.need("attention.head_count"), 0)
    ctx_train = k.count("context_length")
    if n_layer <= 0 or (n_head <= 0 and not state) or n_embd <= 0:
        raise ModelShapeError(f"{k.file} declares {n_layer} layers and {n_head} heads: the header is damaged")
    k.check("attention.head_count", n_head)
    n_head_kv = _per_layer(k.get("attention.head_count_kv"), n_layer, n_head)
    k.check("attention.head_count_kv", max(n_head_kv))
    head_k = k.count("attention.key_length", n_embd // n_head if n_head else 0)
    head_v = k.count("attention.value_length", n_embd // n_head if n_head else 0)
    # a layer without KV heads keeps a recurrent state (every layer of Mamba or RWKV)
    state_bytes = tuple(4 * state if state and not kv else 0 for kv in n_head_kv)
    window = k.count("attention.sliding_window", 0)
    swa, assumed = swa_layers(n_layer, window, k.get("attention.sliding_window_pattern"), k.arch)
    layers, input_bytes, output_bytes, tied, n_params, matmuls = _tensor_groups(header, n_layer)
    embd = next((t for t in header.tensors if t.name == "token_embd.weight"), None)
    n_vocab = k.count("vocab_size", embd.shape[-1] if embd and embd.shape else 0)
    n_ff = k.check("feed_forward_length", _largest(k.get("feed_forward_length"), 4 * n_embd))
    name = header.metadata.get("general.name")
    return ModelShape(
        name=name if isinstance(name, str) else Path(header.path).stem, architecture=k.arch,
        n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, head_dim_k=head_k, head_dim_v=head_v,
        n_embd=n_embd, n_ff=n_ff, n_vocab=n_vocab,
        ctx_train=ctx_train, sliding_window=window, swa_layers=swa, layer_bytes=tuple(layers),
        input_bytes=input_bytes, output_bytes=output_bytes, tied_output=tied, n_params=n_params,
        file_bytes=header.file_size, source="gguf", path=header.path, swa_assumed=assumed,
        state_bytes=state_bytes, experts=_experts(k, n_layer), matmuls=tuple(matmuls),
    )


def shape_from_gguf(path: str | Path) -> ModelShape:
    """Read a GGUF file's header (not its weights) and return the model's shape.

    Raises ``InvalidModelFile`` for a truncated or non-GGUF file and ``ModelShapeError``
    (a subclass) when a needed key is missing.
    """
    return shape_from_header(read_header(path))
