"""Bytes a model takes on each device for a context size, KV type and GPU layer count.

What llama.cpp allocates, as Hearth creates contexts (``runtime.backends.llama``: unified KV
pool of ``n_seq`` running sequences, ``n_ubatch = n_batch``, ``swa_full`` off):

- weights: the CPU keeps the token embeddings and every layer not offloaded (memory-mapped,
  resident once read), and a repacked copy of the matrices of those layers that its kernels
  want interleaved (``runtime.hardware.repack``: most of a Q4_K_M file on an AVX2 CPU); a GPU
  holds its layers, and the output layer when it is offloaded
  (tied embeddings are copied for it). A mixture-of-experts model may keep the routed experts
  of its first ``cpu_moe`` layers on the CPU while the rest of those layers is offloaded
  (llama.cpp's ``--n-cpu-moe``, tensor buffer overrides); prompt batches then copy one layer's
  CPU-held experts at a time to the GPU to multiply them there (ggml's op offload), so the
  largest such layer's experts are counted in that GPU's compute buffer (an estimate from
  ggml's scheduler, not measured here).
- KV cache: per layer ``n_head_kv * (head_dim_k + head_dim_v) * bytes per element`` for every
  cell. The context is padded to 256 cells. A sliding-window layer holds
  ``pad256(min(ctx, window * (n_seq + holders) + n_batch))`` cells (``holders``: the idle
  prefix-cache sequences the worker keeps for such a model), or the whole context with swa_full.
  llama.cpp clears the cache when it creates it, so it is resident from the start.
- recurrent state (Mamba, RWKV, a hybrid's recurrent layers): ``n_seq`` states per recurrent
  layer (``ModelShape.state_bytes``), the same at any context size; counted with the KV.
- compute buffer: the larger of the attention step, ``n_batch * n_kv * (n_head + 1) * 4``
  bytes of scores and mask without flash attention (``n_batch * n_kv * 2`` of mask with it),
  plus ``n_batch * (3 * n_embd + n_ff) * 4`` of activations; and the output step,
  ``n_outputs * n_vocab * 4`` of logits plus ``n_batch * 3 * n_embd * 4``. A GPU allocates
  the whole buffer llama.cpp reserves (logits for all ``n_batch`` tokens). On the CPU only
  the pages that are written become resident, and Hearth asks logits for at most one token
  per sequence, so the CPU estimate uses ``n_outputs = n_seq``. These formulas match the
  compute buffer sizes llama.cpp reports for SmolLM2 and Gemma 3 within 4%.
- the rest of the process: logits output buffer (``n_vocab * n_seq * 4``), the vocabulary
  (about 120 bytes a token) and a fixed 22 MiB (allocator arenas, thread stacks, llama.cpp's
  own tables), measured on the two embedded models.
- a multimodal projector (``mmproj``, loaded by libmtmd when one sits beside the model): its
  file's bytes (every tensor is read into memory) on the first GPU when the model has layers
  there (the worker loads it with ``use_gpu`` then), else in RAM, plus ``PROJECTOR_COMPUTE_BYTES``
  for encoding one image or clip: a fixed margin, not measured per projector (counted by the fit
  planner, ``DeviceMemory.projector``, not by ``estimate``).
- the worker process itself (``WORKER_PROCESS_BYTES``, counted by the fit planner, not by
  ``estimate``): the interpreter, numpy and llama-cpp-python's bindings, Hearth's engine
  modules, 25 MiB anonymous and about 7 MiB of code pages no other process shares (PSS of a
  fresh worker after its imports, 27-32 MiB; ``bench/footprint.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.config import SWA_HOLDER_SEQS
from runtime.hardware.shape import ModelShape

MIB = 1 << 20
#: bytes per K or V element of each KV cache type (ggml block sizes: q8_0 34/32, q4_0 18/32)
KV_TYPE_BYTES = {"f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}
CTX_PAD = 256
#: planning margin: every estimate is taken this much larger before it is compared to free memory
SAFETY_FRACTION = 0.10
RUNTIME_BASE_BYTES = 22 * MIB
#: one engine worker's own process beyond llama.cpp's allocations (interpreter and imports)
WORKER_PROCESS_BYTES = 32 * MIB
VOCAB_BYTES_PER_TOKEN = 120
#: host memory a GPU backend's runtime takes (CUDA context, pinned staging buffers)
GPU_HOST_OVERHEAD_BYTES = 256 * MIB
#: a multimodal projector's compute buffer for encoding one image or clip, beside its weights:
#: a fixed margin for the vision towers of small local models (SigLIP / CLIP sized), not a
#: measurement; large towers at high resolution can take more
PROJECTOR_COMPUTE_BYTES = 64 * MIB


class UnknownKVType(ValueError):
    """A KV cache type the planner (and Hearth) does not know."""


def kv_type_bytes(kv_type: str) -> float:
    try:
        return KV_TYPE_BYTES[kv_type]
    except KeyError:
        raise UnknownKVType(f"unknown KV cache type {kv_type!r}: use one of {', '.join(KV_TYPE_BYTES)}") from None


def pad_ctx(n: int) -> int:
    """llama.cpp rounds the context up to a multiple of 256 cells."""
    return max(CTX_PAD, -(-n // CTX_PAD) * CTX_PAD)


@dataclass(slots=True)
class Settings:
    """How the context is created; the same defaults as Hearth's engine."""

    ctx: int
    kv_type: str = "f16"
    #: running sequences
    n_seq: int = 4
    n_batch: int = 512
    swa_full: bool = False
    #: idle prefix-cache sequences beside them where each costs a sliding window of cells
    #: (the worker's ``SWA_HOLDER_SEQS``)
    holders: int = SWA_HOLDER_SEQS


def layer_cells(shape: ModelShape, s: Settings) -> list[int]:
    """KV cells each layer holds."""
    full = pad_ctx(s.ctx)
    if s.swa_full or not shape.sliding_window:
        return [full] * shape.n_layer
    swa = min(full, pad_ctx(min(full, shape.sliding_window * (s.n_seq + s.holders) + s.n_batch)))
    return [swa if is_swa else full for is_swa in shape.swa_layers]


def kv_bytes(shape: ModelShape, s: Settings, layers: range | list[int] | None = None,
             cells_used: int | None = None) -> int:
    """KV bytes of ``layers`` (all by default); ``cells_used`` caps the cells (bytes read per token)."""
    per = kv_type_bytes(s.kv_type)
    cells = layer_cells(shape, s)
    total = 0.0
    for il in range(shape.n_layer) if layers is None else layers:
        n = cells[il] if cells_used is None else min(cells[il], cells_used)
        total += shape.kv_bytes_per_cell(il, per) * n
        if il < len(shape.state_bytes):
            total += shape.state_bytes[il] * s.n_seq
    return int(total)


def state_bytes(shape: ModelShape, s: Settings) -> int:
    """Recurrent state of all sequences (part of ``kv_bytes``; 0 for a transformer)."""
    return shape.state_bytes_per_seq * s.n_seq


def compute_bytes(shape: ModelShape, s: Settings, n_outputs: int, flash_attn: bool) -> int:
    """The compute buffer of one device (see the module docstring)."""
    n_ub, n_kv = s.n_batch, pad_ctx(s.ctx)
    act = n_ub * (3 * shape.n_embd + shape.n_ff) * 4
    scores = n_ub * n_kv * 2 if flash_attn else n_ub * n_kv * (shape.n_head + 1) * 4
    logits = n_outputs * shape.n_vocab * 4 + n_ub * 3 * shape.n_embd * 4
    return max(scores + act, logits)


def runtime_bytes(shape: ModelShape, s: Settings) -> int:
    """Host memory of the loaded model beyond its weights, KV and compute buffers."""
    return RUNTIME_BASE_BYTES + VOCAB_BYTES_PER_TOKEN * shape.n_vocab + shape.n_vocab * s.n_seq * 4


@dataclass(slots=True)
class DeviceMemory:
    name: str
    weights: int = 0
    kv: int = 0
    compute: int = 0
    overhead: int = 0
    layers: list[int] = field(default_factory=list)  #: repeating layers placed here
    output: bool = False  #: the output layer is here
    #: the multimodal projector's weights and compute margin, when it is loaded here
    projector: int = 0
    #: layers placed on another device whose routed experts are held here (the CPU's ``cpu_moe``)
    experts: list[int] = field(default_factory=list)
    #: the CPU backend's repacked copy of matrices it computes (``runtime.hardware.repack``)
    repack: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.repack + self.kv + self.compute + self.overhead + self.projector

    def to_dict(self) -> dict:
        return {
            "device": self.name, "weights_bytes": self.weights, "kv_bytes": self.kv,
            "compute_bytes": self.compute, "overhead_bytes": self.overhead, "projector_bytes": self.projector,
            "repacked_bytes": self.repack,
            "total_bytes": self.total, "layers": len(self.layers), "output_layer": self.output,
            "expert_layers": len(self.experts),
        }


def assign_layers(n_layer: int, n_gpu_layers: int, splits: list[float]) -> list[int]:
    """Device of each layer 0..n_layer (n_layer = output): -1 for the CPU, else a GPU index.

    As llama.cpp: the last ``n_gpu_layers`` of the n_layer + 1 layers (the output counted
    last) go to the GPUs, split in proportion to ``splits`` (each GPU's free memory).
    """
    if not splits:
        return [-1] * (n_layer + 1)
    total = sum(splits) or 1.0
    bounds, acc = [], 0.0
    for share in splits:
        acc += share / total
        bounds.append(acc)
    start = max(n_layer + 1 - n_gpu_layers, 0)
    act = min(n_gpu_layers, n_layer + 1)
    where = []
    for il in range(n_layer + 1):
        if il < start or il - start >= act:
            where.append(-1)
            continue
        frac = (il - start) / act
        where.append(min(next((i for i, b in enumerate(bounds) if frac < b), len(bounds) - 1),
                         len(splits) - 1))
    return where


def estimate(shape: ModelShape, s: Settings, n_gpu_layers: int = 0,
             gpus: list[tuple[str, float]] | None = None,
             remote: frozenset[str] = frozenset(), cpu_moe: int = 0,
             repack: dict[int, int] | None = None) -> tuple[DeviceMemory, list[DeviceMemory]]:
    """Memory on the CPU and on each GPU (``gpus``: name and free bytes, for the split;
    ``remote``: the names among them that are RPC workers' devices, with no runtime here;
    ``cpu_moe``: the first layers whose routed experts stay on the CPU; ``repack``: what this
    CPU repacks, ``runtime.hardware.repack.repack_rules``)."""
    gpus = gpus or []
    where = assign_layers(shape.n_layer, n_gpu_layers if gpus else 0, [free for _, free in gpus])
    cpu = DeviceMemory("CPU", weights=shape.input_bytes)
    devs = [DeviceMemory(name) for name, _ in gpus]
    for il in range(shape.n_layer):
        dev = cpu if where[il] < 0 else devs[where[il]]
        dev.layers.append(il)
        dev.weights += shape.layer_bytes[il]
        if il < cpu_moe and dev is not cpu and shape.expert_bytes(il):
            dev.weights -= shape.expert_bytes(il)
            cpu.weights += shape.expert_bytes(il)
            cpu.experts.append(il)
    out = cpu if where[shape.n_layer] < 0 else devs[where[shape.n_layer]]
    out.output = True
    out.weights += shape.output_bytes if out is cpu else shape.output_matrix_bytes
    cpu.repack = shape.repack_bytes(repack or {}, cpu.layers, out is cpu)
    used = [d for d in devs if d.layers or d.output]
    # Hearth turns flash attention on with GPU layers or a quantized V cache, off otherwise.
    flash = bool(used) or s.kv_type != "f16"
    for d in used:
        d.kv = kv_bytes(shape, s, d.layers)
        d.compute = compute_bytes(shape, s, s.n_batch if d.output or d is used[-1] else 0, True)
    if cpu.experts and used:  # op offload: one layer's CPU-held experts copied to the first GPU
        used[0].compute += max(shape.expert_bytes(il) for il in cpu.experts)
    cpu.kv = kv_bytes(shape, s, cpu.layers)
    if cpu.layers or cpu.output or cpu.experts:
        cpu.compute = compute_bytes(shape, s, s.n_seq, flash)
    else:  # inputs and the embedding lookup only
        cpu.compute = s.n_batch * shape.n_embd * 4 * 2
    local_gpu = any(d.name not in remote for d in used)
    cpu.overhead = runtime_bytes(shape, s) + (GPU_HOST_OVERHEAD_BYTES if local_gpu else 0)
    return cpu, devs


def bytes_per_token(shape: ModelShape, s: Settings, cpu: DeviceMemory, gpus: list[DeviceMemory],
                    filled: int) -> tuple[int, list[int]]:
    """Bytes one decoded token reads on the CPU and on each GPU with ``filled`` cells in use.

    Every weight of a device is read once per token except the token embeddings (one row) and
    the routed experts a token does not use; the KV cache is read up to the filled cells
    (padded to 256, as llama.cpp's n_kv).
    """
    cells = pad_ctx(filled)
    held = {il for d in (cpu, *gpus) for il in d.experts}  # experts away from their layer
    fraction = shape.experts.fraction if shape.experts is not None else 1.0

    def device_bytes(d: DeviceMemory) -> int:
        w = sum(shape.read_bytes(il) - (shape.expert_bytes(il) * fraction if il in held else 0)
                for il in d.layers)
        w += sum(shape.expert_bytes(il) * fraction for il in d.experts)
        if d.output:
            w += shape.output_matrix_bytes
        return int(w) + kv_bytes(shape, s, d.layers, cells)

    return device_bytes(cpu), [device_bytes(g) for g in gpus]
