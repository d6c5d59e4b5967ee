"""The tiny projectors of ``tests/media_models.py`` load and run in llama.cpp's libmtmd with
the embedded SmolLM2 (n_embd 576), and with the spec tests' tiny llama model (n_embd 64)."""

from __future__ import annotations

import llama_cpp.mtmd_cpp as mt
import numpy as np
import pytest

from tests.media_models import (
    IMAGE_SIZE, NON_CAUSAL, QWEN2VL_EMBD, SAMPLE_RATE, TOKENS_PER_AUDIO_WINDOW, TOKENS_PER_IMAGE, audio_windows,
    encode_once, media_chunks, mtmd_session, qwen2vl_grid, tokenize, write_audio_projector, write_projector,
    write_qwen2vl_projector, write_qwen2vl_text, write_vision_projector,
)
from tests.spec.tiny_models import write_tiny

SMOL_EMBD = 576


def image(seed: int, h: int = 48, w: int = 40) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def tone(seconds: float, hz: float = 440.0) -> np.ndarray:
    t = np.arange(round(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def check_embeddings(n: int, embd: np.ndarray, n_tokens: int, n_embd: int) -> None:
    assert n == n_tokens
    assert embd.shape == (n_tokens, n_embd) and embd.dtype == np.float32
    assert np.isfinite(embd).all()
    assert np.abs(embd).mean() > 1e-3  # not all zero
    assert len({row.tobytes() for row in embd}) == n_tokens  # each token its own vector


def describe(ctx, media) -> list[tuple[int, int, int, bool]]:
    """(type, n_tokens, n_pos, non-causal) of each media chunk of a prompt with ``media``."""
    chunks = tokenize(ctx, media)
    try:
        return [(mt.mtmd_input_chunk_get_type(c), mt.mtmd_input_chunk_get_n_tokens(c),
                 mt.mtmd_input_chunk_get_n_pos(c), bool(mt.mtmd_decode_use_non_causal(ctx, c)))
                for c in media_chunks(chunks)]
    finally:
        mt.mtmd_input_chunks_free(chunks)


@pytest.mark.parametrize("kind", ["mlp", "gemma3"])
def test_a_vision_projector_makes_an_image_into_embeddings_of_the_text_width(kind, smollm2_path, tmp_path):
    proj = write_vision_projector(tmp_path / f"{kind}.gguf", SMOL_EMBD, kind=kind)
    assert proj.stat().st_size < 1_000_000
    with mtmd_session(smollm2_path, proj) as (ctx, n_embd):
        assert n_embd == SMOL_EMBD
        assert mt.mtmd_support_vision(ctx) and not mt.mtmd_support_audio(ctx)
        assert not mt.mtmd_decode_use_mrope(ctx)
        n_tok = TOKENS_PER_IMAGE[kind]
        # any size is resized to the projector's square: the same count for both
        for h, w in ((48, 40), (IMAGE_SIZE, IMAGE_SIZE)):
            assert describe(ctx, image(0, h, w)) == [(mt.MTMD_INPUT_CHUNK_TYPE_IMAGE, n_tok, n_tok, NON_CAUSAL[kind])]
    n, embd = encode_once(smollm2_path, proj, image(0))
    check_embeddings(n, embd, TOKENS_PER_IMAGE[kind], SMOL_EMBD)
    assert np.array_equal(encode_once(smollm2_path, proj, image(0))[1], embd)  # deterministic
    assert not np.allclose(encode_once(smollm2_path, proj, image(1))[1], embd)  # sees the pixels
    other = write_vision_projector(tmp_path / f"{kind}-2.gguf", SMOL_EMBD, kind=kind, seed=1)
    assert not np.allclose(encode_once(smollm2_path, other, image(0))[1], embd)  # the seed's weights


def test_the_audio_projector_makes_a_clip_into_embeddings_per_30_s_window(smollm2_path, tmp_path):
    proj = write_audio_projector(tmp_path / "audio.gguf", SMOL_EMBD)
    assert proj.stat().st_size < 1_000_000
    with mtmd_session(smollm2_path, proj) as (ctx, _):
        assert mt.mtmd_support_audio(ctx) and not mt.mtmd_support_vision(ctx)
        assert mt.mtmd_get_audio_sample_rate(ctx) == SAMPLE_RATE
        n_tok = TOKENS_PER_AUDIO_WINDOW
        audio = (mt.MTMD_INPUT_CHUNK_TYPE_AUDIO, n_tok, n_tok, False)
        assert describe(ctx, tone(0.05)) == describe(ctx, tone(1.0)) == [audio]
        assert audio_windows(31.0) == 2 and describe(ctx, tone(31.0)) == [audio, audio]  # one medium, two chunks
    n, embd = encode_once(smollm2_path, proj, tone(1.0))
    check_embeddings(n, embd, TOKENS_PER_AUDIO_WINDOW, SMOL_EMBD)
    assert np.array_equal(encode_once(smollm2_path, proj, tone(1.0))[1], embd)
    assert not np.allclose(encode_once(smollm2_path, proj, tone(1.0, hz=1000.0))[1], embd)


@pytest.mark.parametrize("kind", ["mlp", "gemma3"])
def test_one_file_with_both_towers(kind, smollm2_path, tmp_path):
    proj = write_projector(tmp_path / f"both-{kind}.gguf", SMOL_EMBD, vision=kind, audio=True)
    assert proj.stat().st_size < 1_000_000
    with mtmd_session(smollm2_path, proj) as (ctx, _):
        assert mt.mtmd_support_vision(ctx) and mt.mtmd_support_audio(ctx)
        n_img, n_aud = TOKENS_PER_IMAGE[kind], TOKENS_PER_AUDIO_WINDOW
        # non-causal is a property of the chunk's modality: a Gemma 3 image's, never the audio's
        assert describe(ctx, image(0)) == [(mt.MTMD_INPUT_CHUNK_TYPE_IMAGE, n_img, n_img, NON_CAUSAL[kind])]
        assert describe(ctx, tone(1.0)) == [(mt.MTMD_INPUT_CHUNK_TYPE_AUDIO, n_aud, n_aud, False)]
    check_embeddings(*encode_once(smollm2_path, proj, image(0)), TOKENS_PER_IMAGE[kind], SMOL_EMBD)
    check_embeddings(*encode_once(smollm2_path, proj, tone(1.0)), TOKENS_PER_AUDIO_WINDOW, SMOL_EMBD)


def test_a_projector_of_another_width_is_refused(smollm2_path, tmp_path):
    proj = write_vision_projector(tmp_path / "narrow.gguf", 64)
    with pytest.raises(RuntimeError, match="could not load"):
        with mtmd_session(smollm2_path, proj):
            pass


def test_the_tiny_llama_model_takes_the_mlp_and_audio_projectors(tmp_path):
    """The spec tests' 64-wide model has no byte tokens: the prompt is the marker alone (and
    Gemma 3's ``<start_of_image>`` text cannot be tokenized with it)."""
    text_model = write_tiny(tmp_path / "tiny.gguf", seed=0)
    proj = write_projector(tmp_path / "tiny-proj.gguf", 64, vision="mlp", audio=True)
    marker = mt.mtmd_default_marker()
    check_embeddings(*encode_once(text_model, proj, image(0), text=marker), TOKENS_PER_IMAGE["mlp"], 64)
    check_embeddings(*encode_once(text_model, proj, tone(1.0), text=marker), TOKENS_PER_AUDIO_WINDOW, 64)


def test_the_qwen2vl_projector_makes_a_grid_placed_with_m_rope(smollm2_path, tmp_path):
    """The tiny Qwen2-VL projector with the tiny ``qwen2vl`` text model: libmtmd says to place its
    images with M-RoPE; a non-square image is nx * ny embeddings on max(nx, ny) positions."""
    text = write_qwen2vl_text(tmp_path / "qwen2vl.gguf", smollm2_path)
    proj = write_qwen2vl_projector(tmp_path / "mmproj-qwen2vl.gguf", QWEN2VL_EMBD)
    nx, ny = qwen2vl_grid(48, 32)
    with mtmd_session(text, proj) as (ctx, n_embd):
        assert n_embd == QWEN2VL_EMBD and mt.mtmd_decode_use_mrope(ctx)
        assert describe(ctx, image(0, h=32, w=48)) == [(mt.MTMD_INPUT_CHUNK_TYPE_IMAGE, nx * ny, max(nx, ny), False)]
    n, embd = encode_once(text, proj, image(0, h=32, w=48))
    check_embeddings(n, embd, nx * ny, QWEN2VL_EMBD)
