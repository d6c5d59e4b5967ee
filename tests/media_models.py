"""Tiny multimodal projector ("mmproj") GGUF files with random weights, for libmtmd.

llama.cpp's multimodal library (``llama_cpp.mtmd_cpp``, the libmtmd of llama-cpp-python
0.3.36) loads these as it loads a real model's ``mmproj`` file; the keys and tensor names and
shapes are the ones ``tools/mtmd/clip.cpp`` reads (``clip-impl.h``: ``KEY_*``, ``TN_*``) and
the graph builders under ``tools/mtmd/models`` use. Shapes below are numpy's (the reverse of
ggml's ``ne``). The projector's output width is the text model's ``n_embd``, which libmtmd
checks at load.

Vision (an image of any size is resized to ``IMAGE_SIZE`` x ``IMAGE_SIZE``, so it is always
``TOKENS_PER_IMAGE`` tokens):

* ``"mlp"``: a CLIP tower (class embedding, pre-layernorm, 2 layers of which llava uses the
  first) and the llava MLP projector (``PROJECTOR_TYPE_MLP``, ``models/llava.cpp``): 8-pixel
  patches, 4x4 = 16 tokens, decoded causally.
* ``"gemma3"``: a SigLIP tower and Gemma 3's projector (``PROJECTOR_TYPE_GEMMA3``,
  ``models/siglip.cpp``): 4-pixel patches (8x8), average-pooled 2x2 to 16 tokens; libmtmd says
  to decode them with non-causal attention (``mtmd_decode_use_non_causal``).

Qwen2-VL (``write_qwen2vl_projector``, ``PROJECTOR_TYPE_QWEN2VL``, ``models/qwen2vl.cpp``) with a
tiny ``qwen2vl`` text model (``write_qwen2vl_text``): images keep their aspect (sides multiples of
8 pixels), one token per 8 x 8 pixels, placed by the text model with M-RoPE on an nx x ny grid
that takes max(nx, ny) positions.

Audio (``PROJECTOR_TYPE_ULTRAVOX``, ``models/whisper-enc.cpp``): a whisper-style encoder (two
1-D convolutions, one transformer layer over 1500 positions) and Ultravox's stacking SwiGLU
projector. libmtmd's whisper preprocessing appends 30 s of silence and cuts the log-mel
spectrogram into 30 s windows (3000 frames), dropping the incomplete last one: a clip of ``s``
seconds is ``audio_windows(s)`` consecutive audio chunks (1 for a clip shorter than 29.99 s, one
more per further 30 s), each ``TOKENS_PER_AUDIO_WINDOW`` tokens whatever the clip's length.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

IMAGE_SIZE = 32
TOKENS_PER_IMAGE = {"mlp": 16, "gemma3": 16}
NON_CAUSAL = {"mlp": False, "gemma3": True, "ultravox": False}
SAMPLE_RATE = 16_000
TOKENS_PER_AUDIO_WINDOW = 15

_V_EMBD, _V_HEADS, _V_FF, _V_LAYERS = 32, 4, 64, 2
_PATCH = {"mlp": 8, "gemma3": 4}
_GEMMA3_MERGE = 2  # 8x8 patches pooled 2x2 -> 4x4 tokens
_A_EMBD, _A_HEADS, _A_FF, _A_LAYERS = 16, 2, 32, 1
_N_MEL = 80
_A_POS = 1500  # positions after the stride-2 convolution of one 3000-frame window
_STACK = 100  # 1500 frames stacked 100 at a time -> 15 tokens
_A_HIDDEN = 16  # the projector's SwiGLU width


def audio_windows(seconds: float) -> int:
    """How many audio chunks (30 s windows) libmtmd makes of a clip of ``seconds`` at 16 kHz."""
    n_frames = (round(seconds * SAMPLE_RATE) + 30 * SAMPLE_RATE) // 160 + 1
    return n_frames // 3000


def _rng_mat(rng: np.random.Generator):
    def mat(*shape: int, fan_in: int | None = None) -> np.ndarray:
        fan = fan_in or shape[-1]
        return rng.normal(0.0, 1.0 / np.sqrt(fan), size=shape).astype(np.float32)
    return mat


def _layers(prefix: str, n_layer: int, n_embd: int, n_ff: int, mat, k_bias: bool) -> dict[str, np.ndarray]:
    """A pre-norm transformer's layers under clip.cpp's names (``TN_ATTN_*``, ``TN_LN_*``,
    ``TN_FFN_*``); whisper has no K bias."""
    t: dict[str, np.ndarray] = {}
    ones, zeros = np.ones(n_embd, np.float32), np.zeros(n_embd, np.float32)
    for il in range(n_layer):
        p = f"{prefix}.blk.{il}."
        t[p + "ln1.weight"], t[p + "ln1.bias"] = ones, zeros
        t[p + "ln2.weight"], t[p + "ln2.bias"] = ones, zeros
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            t[p + name + ".weight"] = mat(n_embd, n_embd)
            if name != "attn_k" or k_bias:
                t[p + name + ".bias"] = mat(n_embd) * 0.1
        t[p + "ffn_up.weight"], t[p + "ffn_up.bias"] = mat(n_ff, n_embd), mat(n_ff) * 0.1
        t[p + "ffn_down.weight"], t[p + "ffn_down.bias"] = mat(n_embd, n_ff), mat(n_embd) * 0.1
    return t


def _vision(kind: str, n_embd_text: int, mat, image_size: int = IMAGE_SIZE) -> tuple[dict, dict[str, np.ndarray]]:
    if kind not in _PATCH:
        raise ValueError(f"unknown vision projector kind {kind!r}: use one of {sorted(_PATCH)}")
    patch = _PATCH[kind]
    n_patches = (image_size // patch) ** 2
    kv = {
        "clip.has_vision_encoder": True,
        "clip.vision.projector_type": kind,
        "clip.vision.image_size": image_size,
        "clip.vision.patch_size": patch,
        "clip.vision.embedding_length": _V_EMBD,
        "clip.vision.feed_forward_length": _V_FF,
        "clip.vision.block_count": _V_LAYERS,
        "clip.vision.projection_dim": n_embd_text,
        "clip.vision.attention.head_count": _V_HEADS,
        "clip.vision.attention.layer_norm_epsilon": 1e-6,
        "clip.vision.image_mean": [0.5, 0.5, 0.5],
        "clip.vision.image_std": [0.5, 0.5, 0.5],
    }
    t = {
        "v.patch_embd.weight": mat(_V_EMBD, 3, patch, patch, fan_in=3 * patch * patch),
        "v.patch_embd.bias": mat(_V_EMBD) * 0.1,
    }
    t.update(_layers("v", _V_LAYERS, _V_EMBD, _V_FF, mat, k_bias=True))
    if kind == "mlp":  # CLIP + llava: class token, positions looked up by index, 2-layer MLP
        t["v.class_embd"] = mat(_V_EMBD)
        t["v.position_embd.weight"] = mat(n_patches + 1, _V_EMBD) * 0.1
        t["v.pre_ln.weight"], t["v.pre_ln.bias"] = np.ones(_V_EMBD, np.float32), np.zeros(_V_EMBD, np.float32)
        t["mm.0.weight"], t["mm.0.bias"] = mat(2 * _V_EMBD, _V_EMBD), mat(2 * _V_EMBD) * 0.1
        t["mm.2.weight"], t["mm.2.bias"] = mat(n_embd_text, 2 * _V_EMBD), mat(n_embd_text) * 0.1
    else:  # SigLIP + Gemma 3: positions added whole, post-layernorm, pool, RMS norm, projection
        kv["clip.use_gelu"] = True
        kv["clip.vision.projector.scale_factor"] = _GEMMA3_MERGE
        t["v.position_embd.weight"] = mat(n_patches, _V_EMBD) * 0.1
        t["v.post_ln.weight"], t["v.post_ln.bias"] = np.ones(_V_EMBD, np.float32), np.zeros(_V_EMBD, np.float32)
        t["mm.soft_emb_norm.weight"] = np.ones(_V_EMBD, np.float32)
        t["mm.input_projection.weight"] = mat(_V_EMBD, n_embd_text, fan_in=_V_EMBD)  # ggml ne = [text, vision]
    return kv, t


def _audio(n_embd_text: int, mat) -> tuple[dict, dict[str, np.ndarray]]:
    kv = {
        "clip.has_audio_encoder": True,
        "clip.audio.projector_type": "ultravox",
        "clip.audio.num_mel_bins": _N_MEL,
        "clip.audio.embedding_length": _A_EMBD,
        "clip.audio.feed_forward_length": _A_FF,
        "clip.audio.block_count": _A_LAYERS,
        "clip.audio.projection_dim": n_embd_text,
        "clip.audio.attention.head_count": _A_HEADS,
        "clip.audio.attention.layer_norm_epsilon": 1e-5,
        "clip.audio.projector.stack_factor": _STACK,
    }
    t = {
        # conv kernels are F16 as the converter writes them (ggml_conv_1d's im2col is F16);
        # conv biases are [n_embd, 1] so that they broadcast over time
        "a.conv1d.1.weight": mat(_A_EMBD, _N_MEL, 3, fan_in=3 * _N_MEL).astype(np.float16),
        "a.conv1d.1.bias": mat(_A_EMBD, 1) * 0.1,
        "a.conv1d.2.weight": mat(_A_EMBD, _A_EMBD, 3, fan_in=3 * _A_EMBD).astype(np.float16),
        "a.conv1d.2.bias": mat(_A_EMBD, 1) * 0.1,
        "a.position_embd.weight": mat(_A_POS, _A_EMBD) * 0.1,
        "a.post_ln.weight": np.ones(_A_EMBD, np.float32),
        "a.post_ln.bias": np.zeros(_A_EMBD, np.float32),
        "mm.a.norm_pre.weight": np.ones(_A_EMBD * _STACK, np.float32),
        "mm.a.mlp.1.weight": mat(2 * _A_HIDDEN, _A_EMBD * _STACK),
        "mm.a.norm_mid.weight": np.ones(_A_HIDDEN, np.float32),
        "mm.a.mlp.2.weight": mat(n_embd_text, _A_HIDDEN),
    }
    t.update(_layers("a", _A_LAYERS, _A_EMBD, _A_FF, mat, k_bias=False))
    return kv, t


def write_projector(path: Path | str, n_embd_text: int, vision: str | None = "mlp", audio: bool = False,
                    seed: int = 0, image_size: int = IMAGE_SIZE) -> Path:
    """An mmproj file with a vision tower of kind ``vision`` (None: none) and/or the audio
    encoder; both in one file is what libmtmd calls a mixed-modality projector (each modality
    names its projector type in its own key). ``image_size``: the square images are resized to
    (an image is ``(image_size / patch)**2`` embeddings for "mlp": 16 at the default 32)."""
    if vision is None and not audio:
        raise ValueError("a projector needs vision, audio or both")
    path = Path(path)
    mat = _rng_mat(np.random.default_rng(seed))
    kv: dict = {}
    tensors: dict[str, np.ndarray] = {}
    for part in ([_vision(vision, n_embd_text, mat, image_size)] if vision else []) + ([_audio(n_embd_text, mat)] if audio else []):
        kv.update(part[0])
        tensors.update(part[1])
    w = GGUFWriter(str(path), "clip")
    w.add_name("hearth tiny test projector")
    for key, value in kv.items():
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)  # clip.cpp reads every integer key as u32
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_array(key, value)  # a list of floats: a FLOAT32 array
    for name, tensor in tensors.items():
        w.add_tensor(name, np.ascontiguousarray(tensor))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_vision_projector(path: Path | str, n_embd_text: int, kind: str = "mlp", seed: int = 0) -> Path:
    """A vision-only mmproj: ``kind`` "mlp" (llava, causal) or "gemma3" (non-causal); one image
    is ``TOKENS_PER_IMAGE[kind]`` (16) embeddings of width ``n_embd_text``."""
    return write_projector(path, n_embd_text, vision=kind, audio=False, seed=seed)


def write_audio_projector(path: Path | str, n_embd_text: int, seed: int = 0) -> Path:
    """An audio-only mmproj (Ultravox, causal): 16 kHz mono PCM, ``TOKENS_PER_AUDIO_WINDOW``
    (15) embeddings of width ``n_embd_text`` per 30 s window (``audio_windows``)."""
    return write_projector(path, n_embd_text, vision=None, audio=True, seed=seed)


# -- running one through libmtmd -------------------------------------------------------------

@contextlib.contextmanager
def mtmd_session(text_model_path: Path | str, mmproj_path: Path | str) -> Iterator[tuple[int, int]]:
    """(libmtmd context, the text model's n_embd): ``mmproj_path`` bound to the text model, on
    the CPU; both freed on exit. The model is loaded whole: loaded ``vocab_only`` its n_embd
    reads 0, and libmtmd then skips its check that the projector's width matches."""
    import llama_cpp as lc
    import llama_cpp.mtmd_cpp as mt

    lc.llama_backend_init()
    mparams = lc.llama_model_default_params()
    mparams.n_gpu_layers = 0
    model = lc.llama_model_load_from_file(str(text_model_path).encode(), mparams)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {text_model_path}")
    try:
        params = mt.mtmd_context_params_default()
        params.use_gpu = False
        params.n_threads = 2
        params.print_timings = False
        params.warmup = False
        ctx = mt.mtmd_init_from_file(str(mmproj_path).encode(), model, params)
        if not ctx:
            raise RuntimeError(f"libmtmd could not load {mmproj_path}")
        try:
            yield ctx, lc.llama_model_n_embd_inp(model)
        finally:
            mt.mtmd_free(ctx)
    finally:
        lc.llama_model_free(model)


def tokenize(ctx, media: np.ndarray, text: bytes | None = None):
    """``mtmd_tokenize`` of ``text`` (default: a sentence around one ``mtmd_default_marker()``)
    with ``media``: an (h, w, 3) uint8 RGB image or 1-D float32 PCM at 16 kHz. Returns the
    native chunk list; the caller frees it with ``mtmd_input_chunks_free``."""
    import llama_cpp.mtmd_cpp as mt

    if text is None:
        text = b"Here: " + mt.mtmd_default_marker() + b" - what is it?"
    media = np.ascontiguousarray(media)
    if media.ndim == 3:
        h, w, c = media.shape
        if c != 3 or media.dtype != np.uint8:
            raise ValueError("an image is (h, w, 3) uint8 RGB")
        rgb = (ctypes.c_uint8 * media.size).from_buffer_copy(media.tobytes())
        bitmap = mt.mtmd_bitmap_init(w, h, rgb)
    else:
        pcm = media.astype(np.float32, copy=False).ravel()
        bitmap = mt.mtmd_bitmap_init_from_audio(len(pcm), pcm.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    if not bitmap:
        raise RuntimeError("libmtmd made no bitmap of this medium")
    chunks = mt.mtmd_input_chunks_init()
    try:
        inp = mt.mtmd_input_text(text, len(text), True, True)
        rc = mt.mtmd_tokenize(ctx, chunks, ctypes.byref(inp), (mt.mtmd_bitmap_p_ctypes * 1)(bitmap), 1)
    finally:
        mt.mtmd_bitmap_free(bitmap)  # the chunks hold their own preprocessed copy
    if rc != 0:
        mt.mtmd_input_chunks_free(chunks)
        raise RuntimeError(f"mtmd_tokenize failed with {rc}")
    return chunks


def media_chunks(chunks) -> list:
    """The image and audio chunks (pointers owned by ``chunks``) in order."""
    import llama_cpp.mtmd_cpp as mt

    found = []
    for i in range(mt.mtmd_input_chunks_size(chunks)):
        chunk = mt.mtmd_input_chunks_get(chunks, i)
        if mt.mtmd_input_chunk_get_type(chunk) != mt.MTMD_INPUT_CHUNK_TYPE_TEXT:
            found.append(chunk)
    return found


def encode_once(text_model_path: Path | str, mmproj_path: Path | str, media: np.ndarray,
                text: bytes | None = None) -> tuple[int, np.ndarray]:
    """Tokenize a prompt with one medium (see ``tokenize``; a text model whose vocabulary has
    no byte tokens, as ``tests/spec/tiny_models.py``'s, needs ``text=mtmd_default_marker()``
    alone), encode its media chunks and return
    (number of media tokens, their embeddings as an (n_tokens, n_embd_text) float32 array).
    Everything native is freed before it returns."""
    import llama_cpp.mtmd_cpp as mt

    with mtmd_session(text_model_path, mmproj_path) as (ctx, n_embd):
        chunks = tokenize(ctx, media, text)
        try:
            parts = []
            for chunk in media_chunks(chunks):
                n_tok = mt.mtmd_input_chunk_get_n_tokens(chunk)
                if mt.mtmd_encode_chunk(ctx, chunk) != 0:
                    raise RuntimeError("mtmd_encode_chunk failed")
                out = mt.mtmd_get_output_embd(ctx)  # owned by ctx, overwritten by the next encode
                parts.append(np.ctypeslib.as_array(out, shape=(n_tok * n_embd,)).reshape(n_tok, n_embd).copy())
        finally:
            mt.mtmd_input_chunks_free(chunks)
    embd = np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)
    return len(embd), embd


# -- Qwen2-VL: M-RoPE -------------------------------------------------------------------------

#: the Qwen2-VL projector's patch side; 2x2 patches merge into one token, so a token covers
#: ``QWEN2VL_TOKEN_SIDE`` pixels a side and an image of w x h pixels (multiples of it, within
#: libmtmd's 8..4096 tokens) is a grid of ``w / 8`` x ``h / 8`` tokens
QWEN2VL_PATCH = 4
QWEN2VL_TOKEN_SIDE = 2 * QWEN2VL_PATCH


def qwen2vl_grid(w: int, h: int) -> tuple[int, int]:
    """(nx, ny) of an image of ``w`` x ``h`` pixels, multiples of ``QWEN2VL_TOKEN_SIDE``."""
    return w // QWEN2VL_TOKEN_SIDE, h // QWEN2VL_TOKEN_SIDE


def write_qwen2vl_projector(path: Path | str, n_embd_text: int, seed: int = 0) -> Path:
    """A Qwen2-VL mmproj (``PROJECTOR_TYPE_QWEN2VL``, "qwen2vl_merger", ``models/qwen2vl.cpp``):
    two patch convolutions (a still image goes through both), a ViT with 2-D M-RoPE, and the
    merger MLP over 2x2 patches. Its images are placed by the text model with M-RoPE
    (``mtmd_decode_use_mrope``) when that model's rope type is M-RoPE."""
    path = Path(path)
    mat = _rng_mat(np.random.default_rng(seed))
    p = QWEN2VL_PATCH
    kv = {
        "clip.has_vision_encoder": True,
        "clip.vision.projector_type": "qwen2vl_merger",
        "clip.vision.image_size": 64,
        "clip.vision.patch_size": p,
        "clip.vision.embedding_length": _V_EMBD,
        "clip.vision.feed_forward_length": _V_FF,
        "clip.vision.block_count": _V_LAYERS,
        "clip.vision.projection_dim": n_embd_text,
        "clip.vision.attention.head_count": _V_HEADS,
        "clip.vision.attention.layer_norm_epsilon": 1e-6,
        "clip.vision.image_mean": [0.5, 0.5, 0.5],
        "clip.vision.image_std": [0.5, 0.5, 0.5],
    }
    t = {
        "v.patch_embd.weight": mat(_V_EMBD, 3, p, p, fan_in=3 * p * p),
        "v.patch_embd.weight.1": mat(_V_EMBD, 3, p, p, fan_in=3 * p * p),
        "mm.0.weight": mat(4 * _V_EMBD, 4 * _V_EMBD), "mm.0.bias": mat(4 * _V_EMBD) * 0.1,
        "mm.2.weight": mat(n_embd_text, 4 * _V_EMBD), "mm.2.bias": mat(n_embd_text) * 0.1,
    }
    t.update(_layers("v", _V_LAYERS, _V_EMBD, _V_FF, mat, k_bias=True))
    _write_gguf(path, kv, t)
    return path


def _write_gguf(path: Path, kv: dict, tensors: dict[str, np.ndarray]) -> None:
    w = GGUFWriter(str(path), "clip")
    w.add_name("hearth tiny test projector")
    for key, value in kv.items():
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_array(key, value)
    for name, tensor in tensors.items():
        w.add_tensor(name, np.ascontiguousarray(tensor))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


#: the tiny Qwen2-VL text model: 2 layers, heads of 16, M-RoPE sections over the 8 rotary pairs
QWEN2VL_EMBD, QWEN2VL_HEADS, QWEN2VL_HEADS_KV, QWEN2VL_FF, QWEN2VL_LAYERS = 64, 4, 2, 128, 2
QWEN2VL_SECTIONS = [2, 3, 3, 0]


def write_qwen2vl_text(path: Path | str, vocab_from: Path | str, seed: int = 0, scale: float = 0.3,
                      chat_template: str | None = None) -> Path:
    """A tiny text model of llama.cpp's ``qwen2vl`` architecture (``src/models/qwen2vl.cpp``:
    M-RoPE with ``qwen2vl.rope.dimension_sections``, Q/K/V biases, tied output) with random
    weights and the tokenizer of the GGUF ``vocab_from`` (the embedded SmolLM2's: its text
    tokenizes as real text)."""
    from gguf import GGUFReader

    path = Path(path)
    rng = np.random.default_rng(seed)

    def mat(*shape: int) -> np.ndarray:
        return (rng.standard_normal(size=shape, dtype=np.float32) * np.float32(scale / np.sqrt(shape[-1]) * 8))

    reader = GGUFReader(str(vocab_from))
    fields = {k: f for k, f in reader.fields.items() if k.startswith("tokenizer.ggml.")}
    tokens = fields["tokenizer.ggml.tokens"].contents()
    n_vocab, d = len(tokens), QWEN2VL_EMBD
    head = d // QWEN2VL_HEADS
    w = GGUFWriter(str(path), "qwen2vl")
    w.add_name("hearth tiny qwen2vl")
    w.add_block_count(QWEN2VL_LAYERS)
    w.add_context_length(4096)
    w.add_embedding_length(d)
    w.add_feed_forward_length(QWEN2VL_FF)
    w.add_head_count(QWEN2VL_HEADS)
    w.add_head_count_kv(QWEN2VL_HEADS_KV)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_array("qwen2vl.rope.dimension_sections", QWEN2VL_SECTIONS)
    w.add_tokenizer_model(fields["tokenizer.ggml.model"].contents())
    w.add_tokenizer_pre(fields["tokenizer.ggml.pre"].contents())
    w.add_token_list(tokens)
    w.add_token_types(fields["tokenizer.ggml.token_type"].contents())
    w.add_token_merges(fields["tokenizer.ggml.merges"].contents())
    w.add_bos_token_id(int(fields["tokenizer.ggml.bos_token_id"].contents()))
    w.add_eos_token_id(int(fields["tokenizer.ggml.eos_token_id"].contents()))
    w.add_add_bos_token(False)
    if chat_template is not None:
        w.add_chat_template(chat_template)
    w.add_tensor("token_embd.weight", (mat(n_vocab, d) * 3).astype(np.float16))
    for il in range(QWEN2VL_LAYERS):
        p = f"blk.{il}."
        kv_width = QWEN2VL_HEADS_KV * head
        w.add_tensor(p + "attn_norm.weight", np.ones(d, np.float32))
        w.add_tensor(p + "attn_q.weight", mat(d, d))
        w.add_tensor(p + "attn_k.weight", mat(kv_width, d))
        w.add_tensor(p + "attn_v.weight", mat(kv_width, d))
        w.add_tensor(p + "attn_q.bias", mat(d) * 0.1)
        w.add_tensor(p + "attn_k.bias", mat(kv_width) * 0.1)
        w.add_tensor(p + "attn_v.bias", mat(kv_width) * 0.1)
        w.add_tensor(p + "attn_output.weight", mat(d, d))
        w.add_tensor(p + "ffn_norm.weight", np.ones(d, np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(QWEN2VL_FF, d))
        w.add_tensor(p + "ffn_up.weight", mat(QWEN2VL_FF, d))
        w.add_tensor(p + "ffn_down.weight", mat(d, QWEN2VL_FF))
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
