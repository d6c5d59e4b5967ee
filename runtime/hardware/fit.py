"""Plan how a model runs here: GPU layers, context, memory, speed, or why it cannot.

Policy, in order:

1. Everything on the GPU(s), at the largest context from the target down to 4096 (or the
   target when smaller): a model that fits whole runs many times faster than a split one.
2. A mixture-of-experts model: every layer on the GPU(s) but the routed experts of its first
   layers, as few layers' experts in RAM as the GPU needs (llama.cpp's ``--n-cpu-moe N``,
   which takes the first N layers; ``FitPlan.cpu_moe_layers``), at the largest context from
   the target (capped as in 3) down to 4096. Attention, router, shared experts and KV cache
   stay on the GPU, and a token reads only its few active experts from RAM: Qwen3-30B-A3B
   Q4_K_M on a 12 GB GPU (RTX 3060, 60 GB/s of RAM bandwidth, uncalibrated) is predicted at
   26 tokens/s so, at 2.2 with whole layers on the CPU.
3. Otherwise the largest context from the target down to 512 at which the model fits with
   as many layers on the GPU as its free memory takes (none without a usable GPU). When
   the model spills off a GPU anyway and no context was asked for, the context is capped
   at 8192 so that cells do not take the place of layers.
4. Otherwise it is too big, and the message gives the numbers and the way out.

Several GPUs: the layers on the GPUs are split between them in proportion to each one's free
memory less its reserve (llama.cpp's ``split_mode`` layer with that ``tensor_split``, which the
worker passes on, so llama.cpp places the layers where the plan counted them); one GPU in use
is ``split_mode`` none with ``main_gpu`` naming it. ``split_mode="row"`` (rows of each matrix
across the GPUs, CUDA only) is planned with the same per-device totals, an approximation.

RPC workers (``hearth rpc-worker`` on other machines) lend devices that count like GPUs, first
in the device order as llama.cpp has them. Without a local GPU, the layers are shared between
this machine's RAM and the workers in proportion to their free memory (a worker is there for
its memory: every layer sent away costs network time per token), and as many as fit stay
local when that share does not fit; with a local GPU, the GPUs and the workers are filled first.

The target context is the requested one, never exceeded, or by default the trained context up to
32768 tokens (an agent's prompt and session fit). By default the KV cache is f16, or q8_0 when
only that holds more of the target context. Every
device keeps a margin: estimates are taken 10% larger, a GPU keeps 512 MiB for its runtime
(CUDA context, cuBLAS), RAM keeps 512 MiB for the service and the OS.

A multimodal projector beside the model (``ModelShape.projector_bytes``) is counted where the
worker loads it: its weights and a fixed compute margin (``memory.PROJECTOR_COMPUTE_BYTES``) on
the first local GPU when the model has layers on a GPU, else in RAM (beside RPC workers only, in
RAM too: the safe side). It is not read per token, so it does not change the predicted speed.

Decode speed: ``runtime.hardware.speed`` (bytes read per token over each device's bandwidth),
and the memory wall beside it: the most tokens per second the bandwidth allows one stream, with
512 cells of its KV cache in use (``decode_limit_tps``) and with the whole context in use
(``decode_limit_at_ctx_tps``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.hardware.advice import Shortfall, explain, gb
from runtime.hardware.gpus import GpuInfo
from runtime.hardware.info import HardwareInfo
from runtime.hardware.memory import (
    PROJECTOR_COMPUTE_BYTES,
    SAFETY_FRACTION,
    WORKER_PROCESS_BYTES,
    DeviceMemory,
    Settings,
    estimate,
    kv_type_bytes,
    state_bytes,
)
from runtime.hardware.repack import repack_rules
from runtime.hardware.shape import ModelShape
from runtime.hardware.speed import PREDICT_AT_CELLS, decode_limit, predict_decode

MIB = 1 << 20
GPU_RESERVE_BYTES = 512 * MIB
#: an RPC worker lends what it reports (``hearth rpc-worker --mem``, or its host's free memory):
#: kept back is only room for its own buffers beside the planned ones
RPC_RESERVE_BYTES = 64 * MIB
RAM_RESERVE_BYTES = 512 * MIB
MIN_CTX = 512
GPU_FIRST_MIN_CTX = 4096
PARTIAL_DEFAULT_CTX_CAP = 8192
#: the default context's ceiling: a coding agent's instructions and tools (20-30k tokens) and a
#: session's turns fit; more is asked for (``--ctx``, ``num_ctx``), never assumed
DEFAULT_CTX_MAX = 32768


@dataclass(slots=True)
class FitPlan:
    model: str
    verdict: str  #: gpu | partial | cpu | too_big
    gpu_layers: int  #: llama.cpp's n_gpu_layers: 0..n_layer + 1 (the output layer counts as one)
    layers_total: int  #: n_layer + 1
    ctx: int
    requested_ctx: int | None
    kv_type: str
    n_seq: int
    n_batch: int
    swa_full: bool
    weights_bytes: int
    kv_bytes: int
    compute_bytes: int
    overhead_bytes: int
    draft_bytes: int
    total_bytes: int
    ram_bytes: int  #: host memory the plan takes
    gpu_bytes: int  #: memory on all GPUs
    ram_available: int
    gpu_free: int
    devices: list[DeviceMemory] = field(default_factory=list)
    predicted_tokens_per_s: float | None = None
    speed_calibrated: bool = False
    message: str = ""
    notes: list[str] = field(default_factory=list)
    #: recurrent state of all sequences (included in kv_bytes): the same at any context
    state_bytes: int = 0
    #: llama.cpp's placement: "none" (one device: ``main_gpu``, or the CPU), "layer" or "row"
    split_mode: str = "none"
    #: share of the GPU layers per usable GPU (ggml's order), when several GPUs are used
    tensor_split: list[float] = field(default_factory=list)
    main_gpu: int = 0
    #: the RPC workers (``HOST:PORT``) whose devices ``tensor_split`` and ``main_gpu`` count, first
    rpc: list[str] = field(default_factory=list)
    #: the multimodal projector's weights and compute margin (included in the devices' totals)
    projector_bytes: int = 0
    #: a MoE model's first layers whose routed experts stay in RAM while the rest of those
    #: layers is on the GPU (llama.cpp's ``--n-cpu-moe``); 0: none
    cpu_moe_layers: int = 0
    #: bytes of those experts (included in ``ram_bytes``)
    cpu_moe_bytes: int = 0
    #: the memory wall: the most tokens/s of one stream, bytes read per token over the bandwidth,
    #: with 512 cells of KV in use (None: too big, or RAM's bandwidth not measured)
    decode_limit_tps: float | None = None
    #: the same with the whole context in use
    decode_limit_at_ctx_tps: float | None = None
    #: the CPU backend's repacked copy of matrices (``runtime.hardware.repack``; in ``ram_bytes``)
    repacked_bytes: int = 0

    @property
    def fits(self) -> bool:
        return self.verdict != "too_big"

    @property
    def n_gpu_layers(self) -> int:
        """The value for ``ContextConfig.n_gpu_layers``."""
        return self.gpu_layers

    def to_dict(self) -> dict:
        d = {name: getattr(self, name) for name in self.__slots__ if name != "devices"}
        d["devices"] = [dev.to_dict() for dev in self.devices]
        d["fits"] = self.fits
        for key in ("predicted_tokens_per_s", "decode_limit_tps", "decode_limit_at_ctx_tps"):
            if d[key] is not None:
                d[key] = round(d[key], 1)
        return d


@dataclass(slots=True)
class _Trial:
    settings: Settings
    gpu_layers: int
    cpu: DeviceMemory  #: the main model's host memory
    gpus: list[DeviceMemory]  #: the main model on each usable GPU
    draft_cpu: DeviceMemory | None
    draft_gpus: list[DeviceMemory]
    fits: bool = False
    cpu_moe: int = 0  #: first layers whose routed experts stay on the CPU

    def merged(self) -> tuple[DeviceMemory, list[DeviceMemory]]:
        """Main model and draft together, per device."""
        cpu = _copy(self.cpu)
        gpus = [_copy(d) for d in self.gpus]
        if self.draft_cpu is not None:
            _add(cpu, self.draft_cpu)
            for into, d in zip(gpus[::-1], self.draft_gpus):
                _add(into, d)
        return cpu, gpus

    @property
    def draft_bytes(self) -> int:
        return (self.draft_cpu.total if self.draft_cpu else 0) + sum(d.total for d in self.draft_gpus)


def reserve(g: GpuInfo) -> int:
    """Bytes a device keeps beyond the plan: a GPU's runtime, or an RPC worker's buffers."""
    return RPC_RESERVE_BYTES if g.remote else GPU_RESERVE_BYTES


def _with_margin(n: int) -> int:
    return int(n * (1 + SAFETY_FRACTION))


def _copy(d: DeviceMemory) -> DeviceMemory:
    return DeviceMemory(d.name, d.weights, d.kv, d.compute, d.overhead, list(d.layers), d.output, d.projector,
                        list(d.experts), d.repack)


def _add(into: DeviceMemory, other: DeviceMemory) -> None:
    into.weights += other.weights
    into.repack += other.repack
    into.kv += other.kv
    into.compute += other.compute
    into.overhead += other.overhead
    into.projector += other.projector


class _Planner:
    def __init__(self, shape: ModelShape, hw: HardwareInfo, settings: Settings, draft: ModelShape | None):
        self.shape, self.hw, self.base, self.draft = shape, hw, settings, draft
        self.gpus: list[GpuInfo] = hw.usable_gpus
        # layers are shared in proportion to what each GPU can take beyond its reserve
        self.pool = [(g.device or g.name, float(max(g.memory_free - reserve(g), 0))) for g in self.gpus]
        self.full = shape.n_layer + 1
        self.split_mode = "layer"
        #: only RPC workers' devices beside the CPU: layers are shared by free memory (shared_split)
        self.remote_only = bool(self.gpus) and all(g.remote for g in self.gpus)
        self.remote = frozenset(g.device or g.name for g in self.gpus if g.remote)
        self.repack = repack_rules(hw.cpu.features)  # what this CPU's llama.cpp keeps a second copy of

    def trial(self, ctx: int, n_gpu: int, cpu_moe: int = 0) -> _Trial:
        s = Settings(ctx, self.base.kv_type, self.base.n_seq, self.base.n_batch, self.base.swa_full)
        cpu, gpus = estimate(self.shape, s, n_gpu, self.pool, self.remote, cpu_moe, self.repack)
        cpu.overhead += WORKER_PROCESS_BYTES  # the worker process the model runs in
        self.place_projector(cpu, gpus, n_gpu)
        t = _Trial(s, n_gpu, cpu, gpus, None, [], cpu_moe=cpu_moe if cpu.experts else 0)
        if self.draft is not None:
            # The draft follows the main model: on the (last) GPU when all of it is there; beside
            # RPC workers, on this machine's CPU (the engine's draft_config places it so).
            on_gpu = bool(self.pool) and n_gpu == self.full and not self.remote
            t.draft_cpu, t.draft_gpus = estimate(
                self.draft, s, self.draft.n_layer + 1 if on_gpu else 0, self.pool[-1:] if on_gpu else [], self.remote,
                repack=self.repack)
        t.fits = self.gpu_fits(t) and self.ram_fits(t)
        return t

    def place_projector(self, cpu: DeviceMemory, gpus: list[DeviceMemory], n_gpu: int) -> None:
        """The model's projector where the worker loads it: libmtmd takes the (first local) GPU
        when the model has layers on one, else the CPU (see the module docstring)."""
        if self.shape.projector_bytes is None:
            return
        local = next((i for i, g in enumerate(self.gpus) if not g.remote), None)
        on = gpus[local] if n_gpu and local is not None else cpu
        on.projector += self.shape.projector_bytes + PROJECTOR_COMPUTE_BYTES

    def gpu_fits(self, t: _Trial) -> bool:
        _, gpus = t.merged()
        return all(not d.total or _with_margin(d.total) + reserve(g) <= g.memory_free
                   for g, d in zip(self.gpus, gpus))

    def ram_fits(self, t: _Trial) -> bool:
        cpu, gpus = t.merged()
        shared = sum(d.total for g, d in zip(self.gpus, gpus) if g.unified)
        return _with_margin(cpu.total + shared) + RAM_RESERVE_BYTES <= self.hw.ram.available

    def shared_split(self, ctx: int) -> _Trial:
        """Layers shared between this machine's RAM and the RPC workers by free memory (each
        less its reserve); when that does not fit, the most the workers can take."""
        remote = sum(share for _, share in self.pool)
        local = float(max(self.hw.ram.available - RAM_RESERVE_BYTES, 0))
        n = round(self.full * remote / (remote + local)) if remote + local else 0
        t = self.trial(ctx, n)
        return t if t.fits else self.best_split(ctx)

    def expert_split(self, ctx: int) -> _Trial | None:
        """Every layer on the GPUs with the routed experts of the fewest first layers on the CPU
        whose GPU part fits (host memory not checked); None when even all experts on the CPU
        leave too much for the GPUs."""
        lo, hi = 1, self.shape.n_layer
        if not self.gpu_fits(self.trial(ctx, self.full, hi)):
            return None
        while lo < hi:  # GPU use shrinks as experts move: bisect the fewest layers that fit
            mid = (lo + hi) // 2
            if self.gpu_fits(self.trial(ctx, self.full, mid)):
                hi = mid
            else:
                lo = mid + 1
        return self.trial(ctx, self.full, lo)

    def best_split(self, ctx: int) -> _Trial:
        """The trial with the most GPU layers whose GPU part fits (host memory not checked)."""
        lo, hi = 0, self.full if self.gpus else 0
        while lo < hi:  # GPU use grows with the layer count: bisect the largest that fits
            mid = (lo + hi + 1) // 2
            if self.gpu_fits(self.trial(ctx, mid)):
                lo = mid
            else:
                hi = mid - 1
        return self.trial(ctx, lo)


def context_candidates(target: int, floor: int) -> list[int]:
    """``target``, then the powers of two below it, down to ``floor``."""
    out = [target]
    p = 1 << (target.bit_length() - 1)
    if p == target:
        p //= 2
    while p >= floor:
        out.append(p)
        p //= 2
    return out


def plan_fit(shape: ModelShape, hardware: HardwareInfo, ctx: int | None = None, kv_type: str | None = None,
             draft: ModelShape | None = None, *, n_seq: int = 4, n_batch: int = 512,
             swa_full: bool = False, split_mode: str = "layer") -> FitPlan:
    """Plan GPU layers and context for ``shape`` on ``hardware`` (see the module docstring).

    ``ctx`` is the context asked for (None: the default context, the trained one up to
    ``DEFAULT_CTX_MAX``); ``kv_type`` the KV cache's type (None: f16, or q8_0 where only that
    holds more of the target context); ``draft`` a speculative draft model that shares the
    context. Raises ValueError for a bad ctx or KV type.
    """
    if kv_type is not None:
        kv_type_bytes(kv_type)
    if split_mode not in ("layer", "row"):
        raise ValueError(f"split mode must be 'layer' or 'row', got {split_mode!r}")
    if ctx is not None and ctx < 1:
        raise ValueError(f"context must be a positive number of tokens, got {ctx}")
    args = (shape, hardware, ctx, draft, n_seq, n_batch, swa_full, split_mode)
    plan = _plan_at(*args, kv_type or "f16")
    if kv_type is None and plan.ctx < _target(shape, ctx):
        smaller = _plan_at(*args, "q8_0")  # half the bytes per cell: an agent's prompt may fit
        if smaller.fits and (not plan.fits or smaller.ctx > plan.ctx):
            smaller.notes.append(f"the KV cache is q8_0: at f16 the context would be {plan.ctx if plan.fits else 0} tokens")
            return smaller
    return plan


def _target(shape: ModelShape, ctx: int | None) -> int:
    if ctx:
        return min(ctx, shape.ctx_train) if shape.ctx_train else ctx
    return min(shape.ctx_train, DEFAULT_CTX_MAX) if shape.ctx_train else 4096


def _plan_at(shape: ModelShape, hardware: HardwareInfo, ctx: int | None, draft: ModelShape | None, n_seq: int,
             n_batch: int, swa_full: bool, split_mode: str, kv_type: str) -> FitPlan:
    target = _target(shape, ctx)
    planner = _Planner(shape, hardware, Settings(target, kv_type, n_seq, n_batch, swa_full), draft)
    planner.split_mode = split_mode
    at_target = planner.best_split(target)
    if planner.gpus and not planner.remote_only:
        for c in context_candidates(target, min(target, GPU_FIRST_MIN_CTX)):
            t = planner.trial(c, planner.full)
            if t.fits:
                return _finish(planner, t, "gpu", ctx, at_target)
    cap = target if ctx or not planner.gpus or planner.remote_only else min(target, PARTIAL_DEFAULT_CTX_CAP)
    if shape.moe and planner.gpus and not planner.remote_only:
        for c in context_candidates(cap, min(cap, GPU_FIRST_MIN_CTX)):
            e = planner.expert_split(c)
            if e is not None and e.fits:
                return _finish(planner, e, "partial", ctx, at_target)
    split = planner.shared_split if planner.remote_only else planner.best_split
    for c in context_candidates(cap, min(cap, MIN_CTX)):
        t = split(c)
        if t.fits:
            return _finish(planner, t, "partial" if t.gpu_layers else "cpu", ctx, at_target)
    return _finish(planner, t, "too_big", ctx, at_target)


def _shortfalls(p: _Planner, t: _Trial) -> list[Shortfall]:
    """Each device the trial does not fit on: what it needs (margins included) and has free."""
    cpu, gpus = t.merged()
    out = [Shortfall(g.name, _with_margin(d.total) + reserve(g), g.memory_free, _weights(t, i))
           for i, (g, d) in enumerate(zip(p.gpus, gpus))
           if d.total and _with_margin(d.total) + reserve(g) > g.memory_free]
    shared = sum(d.total for g, d in zip(p.gpus, gpus) if g.unified)
    need = _with_margin(cpu.total + shared) + RAM_RESERVE_BYTES
    if need > p.hw.ram.available:
        out.append(Shortfall("RAM", need, p.hw.ram.available, _weights(t, -1)))
    return out


def _weights(t: _Trial, gpu: int) -> int:
    return t.cpu.weights if gpu < 0 else t.gpus[gpu].weights


def _finish(p: _Planner, t: _Trial, verdict: str, asked: int | None, at_target: _Trial) -> FitPlan:
    main = [t.cpu, *t.gpus]
    cpu, gpus = t.merged()
    used = [d for d in gpus if d.total]
    tps, calibrated = (predict_decode(p.shape, p.hw, t.settings, t.cpu, t.gpus, p.gpus)
                       if verdict != "too_big" else (None, False))
    limits = [decode_limit(p.shape, p.hw, t.settings, t.cpu, t.gpus, p.gpus, cells)
              if verdict != "too_big" else None for cells in (PREDICT_AT_CELLS, t.settings.ctx)]
    plan = FitPlan(
        model=p.shape.name, verdict=verdict, gpu_layers=t.gpu_layers, layers_total=p.full,
        ctx=t.settings.ctx, requested_ctx=asked, kv_type=t.settings.kv_type,
        n_seq=t.settings.n_seq, n_batch=t.settings.n_batch, swa_full=t.settings.swa_full,
        weights_bytes=sum(d.weights for d in main), repacked_bytes=sum(d.repack for d in main),
        kv_bytes=sum(d.kv for d in main),
        compute_bytes=sum(d.compute for d in main), overhead_bytes=sum(d.overhead for d in main),
        draft_bytes=t.draft_bytes, total_bytes=cpu.total + sum(d.total for d in gpus),
        ram_bytes=cpu.total, gpu_bytes=sum(d.total for d in gpus), ram_available=p.hw.ram.available,
        gpu_free=sum(g.memory_free for g in p.gpus), devices=[cpu, *used],
        predicted_tokens_per_s=tps, speed_calibrated=calibrated,
        state_bytes=state_bytes(p.shape, t.settings), projector_bytes=sum(d.projector for d in main),
        cpu_moe_layers=t.cpu_moe, cpu_moe_bytes=sum(p.shape.expert_bytes(il) for il in t.cpu.experts),
        decode_limit_tps=limits[0], decode_limit_at_ctx_tps=limits[1],
    )
    plan.message, plan.notes = explain(
        plan, p.shape, p.gpus, target_ctx=at_target.settings.ctx,
        target_short=_shortfalls(p, at_target), short=_shortfalls(p, t),
    )
    if plan.projector_bytes:
        where = next(d.name for d in main if d.projector)
        plan.notes.append(f"the multimodal projector (mmproj) takes {gb(plan.projector_bytes)} on {where}"
                          + ("" if p.shape.projector_bytes else
                             ": its file's size is not known yet, so only the margin for encoding is counted"))
    _place(p, t, plan)
    return plan


def _place(p: _Planner, t: _Trial, plan: FitPlan) -> None:
    """llama.cpp's split mode, tensor split and main GPU for the trial's placement."""
    used = [i for i, d in enumerate(t.gpus) if d.layers or d.output]
    if not used:
        return
    plan.rpc = [g.name for g in p.gpus if g.remote]
    if len(used) == 1:
        plan.split_mode, plan.main_gpu = "none", used[0]
        return
    total = sum(share for _, share in p.pool) or 1.0
    plan.tensor_split = [round(share / total, 4) for _, share in p.pool]
    plan.main_gpu = max(used, key=lambda i: p.gpus[i].memory_free)
    mode = p.split_mode
    if mode == "row" and not all((g.backend or "").upper() in ("CUDA", "SYCL") for g in p.gpus):
        plan.notes.append("rows are split across GPUs only by CUDA (and SYCL) builds: split by layers instead")
        mode = "layer"
    plan.split_mode = mode
    shares = ", ".join(f"{d.name}{f' ({g.name})' if g.remote else ''} {len(d.layers) + d.output} layers"
                       for g, d in zip(p.gpus, t.gpus) if d.layers or d.output)
    what = "devices" if plan.rpc else "GPUs"
    plan.notes.append(f"split across {len(used)} {what} by {'rows' if mode == 'row' else 'layers'}: {shares}")
