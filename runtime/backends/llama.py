"""llama.cpp through llama-cpp-python's low-level bindings.

This is the only module (with its siblings in ``runtime/backends/``) that imports
``llama_cpp``. It owns one model and one context with ``n_seq_max`` sequences over a
unified KV pool, a reusable ``llama_batch`` filled through numpy views, the memory API,
tokenization, and native (C) sampling. ``llama_decode`` return codes become typed
exceptions so no raw ``RuntimeError`` reaches the scheduler.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as lc
import numpy as np

from runtime.backends.amx import amx_advertised
from runtime.backends.batch import EmbdBatch, TokenBatch
from runtime.chat.chat_template import ChatTemplate
from runtime.backends.errors import (
    DecodeAbortedError,
    DecodeFatalError,
    InvalidBatchError,
    ModelLoadError,
    NoKVSlotError,
)
from runtime.backends.gpu_split import set_cpu_experts, set_split
from runtime.backends.llama_sampler import NativeSampler
from runtime.backends.media import Projector, silence_media_log
from runtime.config import DEFAULT_CTX, SWA_HOLDER_SEQS
from runtime.sampling_params import SamplingParams

_GGML_LOG_LEVEL_WARN = 3
#: KV cache types by name -> ggml type ids (ggml.h: F16 = 1, Q4_0 = 2, Q8_0 = 8)
KV_TYPES = {"f16": 1, "q8_0": 8, "q4_0": 2}


def _silence_llama_log() -> None:
    """Route llama.cpp's log to nowhere except warnings and errors."""

    @lc.llama_log_callback
    def _log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        if level >= _GGML_LOG_LEVEL_WARN and os.environ.get("HEARTH_LLAMA_LOG"):
            os.write(2, text)

    # Keep a reference: C holds only the raw pointer.
    _silence_llama_log.callback = _log  # type: ignore[attr-defined]
    lc.llama_log_set(_log, ctypes.c_void_p(0))
    silence_media_log(_log)


@dataclass(slots=True)
class ContextConfig:
    n_ctx: int = DEFAULT_CTX
    #: sequence ids: running requests and idle prefix-cache holders
    n_seq_max: int = 4
    #: the running requests alone; where every sequence id costs memory of its own, the
    #: context gets fewer ids than ``n_seq_max``: these plus ``SWA_HOLDER_SEQS`` with
    #: sliding-window layers (each id a window of cells), these alone with a recurrent state
    #: (no holder can keep one). None: always ``n_seq_max``
    n_seq_running: int | None = None
    #: sliding-window layers keep every cell of the context, as the full-attention ones do
    #: (llama.cpp's ``swa_full``); off, they keep a window per sequence and a prefix that ends
    #: before a sequence's last position comes back through a checkpoint
    swa_full: bool = False
    n_batch: int = 512
    n_threads: int = 0  # 0: physical cores
    n_gpu_layers: int = 0
    #: several GPUs: "none" (only ``main_gpu``), "layer" or "row"; ``tensor_split``: share of
    #: the offloaded layers per GPU (None: llama.cpp's default, in proportion to free memory)
    split_mode: str = "layer"
    tensor_split: list[float] | None = None
    main_gpu: int = 0
    #: a mixture-of-experts model: the first layers whose routed experts stay in host memory while
    #: ``n_gpu_layers`` offloads the rest of them (llama.cpp's ``--n-cpu-moe``; the fit plan's
    #: ``cpu_moe_layers``); 0: none
    cpu_moe_layers: int = 0
    #: K and V cache type: f16, q8_0 or q4_0 (a quantized V cache needs flash attention)
    kv_type: str = "f16"
    #: flash attention: None = llama.cpp's "auto" (on). Off, decoding is up to ~7% faster
    #: with an empty pool, but every cached cell held in the unified pool costs far more:
    #: SmolLM2 lost 39% of its decode speed with 2,048 cells held, against 10% with it on.
    flash_attn: bool | None = None
    #: llama.cpp's extra CPU buffer types (weight repacking, AMX); None: off where AMX is advertised
    extra_buffers: bool | None = None
    #: ggml RPC workers (``HOST:PORT``) whose devices take layers: they come first in the device
    #: order ``tensor_split`` and ``main_gpu`` index, then this machine's GPUs (ggml_rpc.py)
    rpc: tuple[str, ...] = ()


@dataclass(slots=True)
class ModelInfo:
    path: str
    description: str
    size_bytes: int
    n_params: int
    n_vocab: int
    n_ctx_train: int
    n_layer: int
    n_head_kv: int
    n_embd: int
    n_swa: int
    has_chat_template: bool
    #: a state per sequence (Mamba, RWKV): no per-token cells, nothing to trim or share
    recurrent: bool = False
    #: attention layers beside recurrent ones (Jamba, Granite 4 hybrid, LFM2, ...)
    hybrid: bool = False
    #: the Jinja chat template in use: the GGUF's own, or the override it was loaded with
    chat_template: str | None = None


def default_threads() -> int:
    import psutil

    return max(1, psutil.cpu_count(logical=False) or os.cpu_count() or 1)


def _rpc_devices(mparams, endpoints: tuple[str, ...]) -> ctypes.Array:
    """Register the RPC workers and name the model's devices: theirs, then this machine's GPUs."""
    from runtime.backends.ggml_rpc import GgmlUnavailable, add_servers, device_list

    try:
        devices = device_list(add_servers(endpoints))
    except GgmlUnavailable as e:
        raise ModelLoadError(str(e)) from None
    mparams.devices = ctypes.cast(devices, ctypes.c_void_p)
    return devices


def _sequence_ids(model, config: ContextConfig) -> int:
    """The context's sequence ids (``ContextConfig.n_seq_running``)."""
    running = config.n_seq_running
    if running is None or running >= config.n_seq_max:
        return config.n_seq_max
    if lc.llama_model_is_recurrent(model) or lc.llama_model_is_hybrid(model):
        return running
    if lc.llama_model_n_swa(model) > 0 and not config.swa_full:
        return min(config.n_seq_max, running + SWA_HOLDER_SEQS)
    return config.n_seq_max


class LlamaBackend:
    """One model, one context, a unified KV pool shared by ``n_seq_max`` sequences."""

    def __init__(self, path: str | Path, config: ContextConfig, eval_callback=None,
                 chat_template: str | None = None) -> None:
        """``eval_callback``: a ``ggml_backend_sched_eval_callback`` that sees the graph's tensors
        (importance measurement); the caller keeps it alive as long as the backend.
        ``chat_template``: used instead of the GGUF's own (``--chat-template-file``, a model's
        stored override)."""
        path = str(path)
        if not Path(path).is_file():
            raise ModelLoadError(f"model file not found: {path}")
        _silence_llama_log()
        lc.llama_backend_init()
        mparams = lc.llama_model_default_params()
        mparams.n_gpu_layers = config.n_gpu_layers
        self._tensor_split = set_split(mparams, config)  # the array must outlive the load
        self._devices = _rpc_devices(mparams, config.rpc) if config.rpc else None  # so must this one
        self._cpu_experts = set_cpu_experts(mparams, config.cpu_moe_layers)  # and this one, the model
        extra = config.extra_buffers
        mparams.use_extra_bufts = (not amx_advertised()) if extra is None else extra
        self.model = lc.llama_model_load_from_file(path.encode(), mparams)
        if not self.model:
            raise ModelLoadError(f"llama.cpp could not load {path}: not a model it can read")
        threads = config.n_threads or default_threads()
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = config.n_ctx
        cparams.n_batch = config.n_batch
        cparams.n_ubatch = config.n_batch
        n_seq_max = _sequence_ids(self.model, config)
        cparams.n_seq_max = n_seq_max
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.kv_unified = True
        cparams.swa_full = config.swa_full
        cparams.no_perf = True
        if eval_callback is not None:
            cparams.cb_eval = eval_callback
        if config.kv_type not in KV_TYPES:
            raise ModelLoadError(f"unknown KV type {config.kv_type!r}: use one of {', '.join(KV_TYPES)}")
        cparams.type_k = cparams.type_v = KV_TYPES[config.kv_type]
        quantized_v = config.kv_type != "f16"
        if config.flash_attn is not None:
            if quantized_v and not config.flash_attn:
                raise ModelLoadError(f"a {config.kv_type} V cache needs flash attention: drop --flash-attn off")
            cparams.flash_attn_type = int(config.flash_attn)
        self.ctx = lc.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            lc.llama_model_free(self.model)
            raise ModelLoadError(
                f"llama.cpp could not create a context of {config.n_ctx} tokens for {path}: "
                "try a smaller context (--ctx)"
            )
        self.vocab = lc.llama_model_get_vocab(self.model)
        self.memory = lc.llama_get_memory(self.ctx)
        self.n_vocab = lc.llama_vocab_n_tokens(self.vocab)
        self.n_ctx = lc.llama_n_ctx(self.ctx)
        self.n_seq_max = n_seq_max
        self.n_batch = config.n_batch
        self.batch = TokenBatch(config.n_batch)
        self.n_threads = threads
        #: images and audio (``attach_projector``); None: text only
        self.projector: Projector | None = None
        self._pieces: dict[int, bytes] = {}
        self._max_piece: int | None = None
        self._piece_buf = ctypes.create_string_buffer(256)
        template = chat_template or self.meta("tokenizer.chat_template")
        self.chat_template = ChatTemplate(
            template,
            bos=self.token_text(lc.llama_vocab_bos(self.vocab)),
            eos=self.token_text(lc.llama_vocab_eos(self.vocab)),
        )
        self.add_bos = bool(lc.llama_vocab_get_add_bos(self.vocab))
        self.info = ModelInfo(
            path=path,
            description=self._desc(),
            size_bytes=lc.llama_model_size(self.model),
            n_params=lc.llama_model_n_params(self.model),
            n_vocab=self.n_vocab,
            n_ctx_train=lc.llama_model_n_ctx_train(self.model),
            n_layer=lc.llama_model_n_layer(self.model),
            n_head_kv=lc.llama_model_n_head_kv(self.model),
            n_embd=lc.llama_model_n_embd(self.model),
            n_swa=lc.llama_model_n_swa(self.model),
            has_chat_template=template is not None,
            recurrent=bool(lc.llama_model_is_recurrent(self.model)),
            hybrid=bool(lc.llama_model_is_hybrid(self.model)),
            chat_template=template,
        )

    # -- metadata ---------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        size = 1 << 16
        while True:
            buf = ctypes.create_string_buffer(size)
            n = lc.llama_model_meta_val_str(self.model, key.encode(), buf, size)
            if n < 0:
                return None
            if n < size:
                return buf.value.decode("utf-8", errors="replace")
            size = n + 1

    def _desc(self) -> str:
        buf = ctypes.create_string_buffer(256)
        lc.llama_model_desc(self.model, buf, 256)
        return buf.value.decode("utf-8", errors="replace")

    # -- tokens -----------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 16
        arr = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self.vocab, data, len(data), arr, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            arr = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self.vocab, data, len(data), arr, cap, add_special, parse_special)
        return list(arr[:n])

    def token_bytes(self, token: int) -> bytes:
        """The bytes a generated token contributes to the text (special tokens render empty)."""
        piece = self._pieces.get(token)
        if piece is None:
            n = lc.llama_token_to_piece(self.vocab, token, self._piece_buf, 256, 0, False)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = lc.llama_token_to_piece(self.vocab, token, buf, -n, 0, False)
                piece = buf.raw[:n]
            else:
                piece = self._piece_buf.raw[:n]
            self._pieces[token] = piece
        return piece

    @property
    def max_piece_bytes(self) -> int:
        """The longest text any one token stands for, special tokens included (computed once:
        ~1 us a token). A prompt longer than ``n`` times this cannot fit in ``n`` tokens."""
        if self._max_piece is None:
            buf = ctypes.create_string_buffer(1024)
            self._max_piece = max((lc.llama_token_to_piece(self.vocab, t, buf, 1024, 0, True)
                                   for t in range(self.n_vocab)), default=1)
            self._max_piece = max(1, min(abs(self._max_piece), 1024))
        return self._max_piece

    def vocab_pieces(self) -> list[bytes]:
        """Every token's bytes, for a grammar matcher over this vocabulary: control tokens
        (and user-defined ``<...>`` ones) render as their text prefixed with ``0xff``, so a
        grammar can name them and plain text never matches them."""
        buf = ctypes.create_string_buffer(16 * 1024)
        special = lc.LLAMA_TOKEN_ATTR_CONTROL
        user = lc.LLAMA_TOKEN_ATTR_USER_DEFINED
        pieces: list[bytes] = []
        for token in range(self.n_vocab):
            n = lc.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
            piece = buf.raw[:max(n, 0)]
            attr = lc.llama_vocab_get_attr(self.vocab, token)
            if attr & special or (attr & user and piece.startswith(b"<") and piece.endswith(b">")):
                piece = b"\xff" + piece
            pieces.append(piece)
        return pieces

    def eog_tokens(self) -> list[int]:
        """The end-of-generation tokens (EOS first)."""
        eos = self.eos
        rest = [t for t in range(self.n_vocab) if t != eos and lc.llama_vocab_is_eog(self.vocab, t)]
        return ([eos] if eos >= 0 else []) + rest

    def token_text(self, token: int) -> str:
        buf = ctypes.create_string_buffer(256)
        n = lc.llama_token_to_piece(self.vocab, token, buf, 256, 0, True)
        return buf.raw[: max(n, 0)].decode("utf-8", errors="replace")

    def detokenize(self, tokens: list[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    @property
    def bos(self) -> int:
        return lc.llama_vocab_bos(self.vocab)

    @property
    def eos(self) -> int:
        return lc.llama_vocab_eos(self.vocab)

    def is_eog(self, token: int) -> bool:
        return bool(lc.llama_vocab_is_eog(self.vocab, token))

    def chat_prompt(self, messages: list[dict], **template_vars) -> list[int]:
        """Render messages with the model's chat template (or the plain fallback) and tokenize."""
        text, add_special = self.chat_text(messages, **template_vars)
        return self.tokenize(text, add_special=add_special, parse_special=True)

    def chat_text(self, messages: list[dict], **template_vars) -> tuple[str, bool]:
        """The rendered prompt, and whether tokenizing it must add the BOS token.

        ``template_vars``: extra template variables (``tools``, ``enable_thinking``)."""
        text = self.chat_template.render(messages, **template_vars)
        bos = self.chat_template.bos
        return text, self.add_bos and not (bos and text.startswith(bos))

    # -- decoding ---------------------------------------------------------------------
    def decode(self, batch: TokenBatch) -> None:
        """Run one llama_decode over ``batch``; raise a typed error when it fails."""
        self._check(lc.llama_decode(self.ctx, batch.prepare()))

    def decode_embd(self, embd: np.ndarray, pos: np.ndarray, seq_id: int, non_causal: bool = False) -> None:
        """Decode a medium's embeddings [n, n_embd] at positions ``pos`` of ``seq_id`` (no logits):
        int32 [n], or [n_pos_per_embd, n] for a model with M-RoPE. More than ``n_batch`` go in
        several decodes, in order. ``non_causal``: the positions attend to each other both ways
        (Gemma 3's images); they must then fit one micro-batch, which ``n_batch`` is."""
        pos = pos.reshape(-1, len(embd))
        if non_causal:
            lc.llama_set_causal_attn(self.ctx, False)
        try:
            for a in range(0, len(embd), len(embd) if non_causal else self.n_batch):
                b = min(len(embd), a + (len(embd) if non_causal else self.n_batch))
                batch = EmbdBatch(embd[a:b], pos[:, a:b], seq_id)
                self._check(lc.llama_decode(self.ctx, batch.prepare()))
        finally:
            if non_causal:
                lc.llama_set_causal_attn(self.ctx, True)

    def attach_projector(self, path: str | Path, use_gpu: bool = False) -> Projector:
        """Load the model's multimodal projector (``mmproj``); ModelLoadError if it does not fit it."""
        self.projector = Projector(path, self.model, self.n_threads, use_gpu)
        return self.projector

    @staticmethod
    def _check(rc: int) -> None:
        if rc == 0:
            return
        if rc == 1:
            raise NoKVSlotError("no KV slot for the batch")
        if rc == 2:
            raise DecodeAbortedError("decode aborted")
        if rc == -1:
            raise InvalidBatchError("llama.cpp refused the batch as invalid")
        raise DecodeFatalError(f"llama_decode failed with code {rc}")

    def logits(self, batch_index: int) -> np.ndarray:
        """Logits of output ``batch_index`` of the last decode: float32 [n_vocab], a view."""
        ptr = lc.llama_get_logits_ith(self.ctx, batch_index)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    def new_sampler(self, params: SamplingParams) -> NativeSampler:
        return NativeSampler(self.n_vocab, params)

    # -- memory -----------------------------------------------------------------------
    def seq_rm(self, seq_id: int, p0: int = 0, p1: int | None = None) -> bool:
        return bool(lc.llama_memory_seq_rm(self.memory, seq_id, p0, -1 if p1 is None else p1))

    def seq_cp(self, src: int, dst: int, p0: int = 0, p1: int | None = None) -> None:
        lc.llama_memory_seq_cp(self.memory, src, dst, p0, -1 if p1 is None else p1)

    def seq_pos_min(self, seq_id: int) -> int | None:
        pos = lc.llama_memory_seq_pos_min(self.memory, seq_id)
        return None if pos < 0 else pos

    def seq_pos_max(self, seq_id: int) -> int | None:
        pos = lc.llama_memory_seq_pos_max(self.memory, seq_id)
        return None if pos < 0 else pos

    def state_seq_save(self, seq_id: int, partial: bool = False) -> bytearray:
        """The sequence's cells as bytes (llama_state_seq_get_data_ext).

        ``partial``: only the memory that cannot be cut at any position
        (``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``): the sliding-window layers' cells of an
        iSWA cache (its last window), the recurrent state of a recurrent or hybrid model.
        A plain KV cache ignores the flag and saves everything.
        """
        flags = lc.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY if partial else 0
        size = lc.llama_state_seq_get_size_ext(self.ctx, seq_id, flags)
        # llama.cpp writes straight into the returned buffer: its pages are touched once (a
        # ctypes array, then a copy to bytes, touched fresh memory twice: 26 MB took 0.36 s on a
        # machine that maps new pages at 70-100 MB/s)
        out = bytearray(size)
        view = (ctypes.c_uint8 * size).from_buffer(out)
        written = lc.llama_state_seq_get_data_ext(self.ctx, view, size, seq_id, flags)
        del view  # the buffer is exported while the array lives
        if written < size:
            del out[written:]
        return out

    def state_seq_load(self, seq_id: int, data: bytes, partial: bool = False) -> bool:
        """Restore saved cells into ``seq_id`` (new cells); False if llama.cpp refused.

        ``partial``: replace only the partial memory (see ``state_seq_save``); the
        full-attention cells of ``seq_id`` stay as they are."""
        flags = lc.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY if partial else 0
        # read in place, not copied first: a saved state is bytes (from disk) or a bytearray
        if isinstance(data, bytearray):
            src = ctypes.cast((ctypes.c_uint8 * len(data)).from_buffer(data), ctypes.POINTER(ctypes.c_uint8))
        else:
            src = ctypes.cast(ctypes.c_char_p(data), ctypes.POINTER(ctypes.c_uint8))
        return lc.llama_state_seq_set_data_ext(self.ctx, src, len(data), seq_id, flags) > 0

    def clear(self) -> None:
        lc.llama_memory_clear(self.memory, True)

    def close(self) -> None:
        projector = getattr(self, "projector", None)
        if projector is not None:
            projector.close()
            self.projector = None
        if getattr(self, "ctx", None):
            lc.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None):
            lc.llama_model_free(self.model)
            self.model = None
