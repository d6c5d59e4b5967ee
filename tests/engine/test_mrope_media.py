"""Images placed with M-RoPE (Qwen2-VL's family) through the engine: a tiny generated ``qwen2vl``
text model and Qwen2-VL projector (``tests/media_models.py``), real libmtmd, real llama.cpp.

The reference is llama.cpp's own multimodal path: ``mtmd_helper_eval_chunks`` on a plain
context, which lays an image of nx x ny tokens at (p0, p0 + row, p0 + column, 0) and starts the
text after it ``max(nx, ny)`` positions later. The engine must give the same greedy tokens and
the same logits, alone, batched, from its prefix cache and its host tier."""

from __future__ import annotations

import ctypes
import io
import math

import numpy as np
import pytest
from PIL import Image

from runtime.backends.batch import TokenBatch
from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.engine.engine import CacheConfig, Engine
from runtime.media import IMAGE, MARKER, Media
from runtime.sampling_params import SamplingParams
from tests.media_models import (
    QWEN2VL_EMBD, qwen2vl_grid, write_qwen2vl_projector, write_qwen2vl_text,
)

N_TOKENS = 6
BLOCK = 16
#: non-square images: (w, h) in pixels -> grids of 6 x 4 and 4 x 8 tokens
WIDE, TALL = (48, 32), (32, 64)
#: 12 x 8 = 96 tokens: more than the test backend's batch of 64, decoded in two pieces in one step
BIG = (96, 64)


def pixels(seed: int, size: tuple[int, int]) -> np.ndarray:
    w, h = size
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def png(seed: int, size: tuple[int, int]) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels(seed, size)).save(buf, "PNG")
    return buf.getvalue()


def greedy(n: int = N_TOKENS) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True, logprobs=True, top_logprobs=3)


@pytest.fixture(scope="module")
def files(smollm2_path, tmp_path_factory):
    d = tmp_path_factory.mktemp("qwen2vl")
    return (write_qwen2vl_text(d / "qwen2vl-tiny.gguf", smollm2_path),
            write_qwen2vl_projector(d / "mmproj-qwen2vl-tiny.gguf", QWEN2VL_EMBD))


@pytest.fixture(scope="module")
def backend(files):
    b = LlamaBackend(files[0], ContextConfig(n_ctx=2048, n_seq_max=8, n_batch=64, n_threads=2))
    b.attach_projector(files[1])
    yield b
    b.close()


def engine(backend, **cache) -> Engine:
    backend.clear()
    return Engine(backend, 4, CacheConfig(**cache))


def run(e: Engine) -> dict[str, tuple[list[int], list[float]]]:
    """request id -> (greedy tokens, each one's logprob)."""
    out: dict[str, tuple[list[int], list[float]]] = {}
    while e.has_work():
        for o in e.step():
            assert o.error is None, o.error
            toks, lps = out.setdefault(o.request_id, ([], []))
            for entry in o.logprobs or []:
                toks.append(entry.token)
                lps.append(entry.logprob)
    return out


def reference(files, text: str, images: list[np.ndarray], n: int = N_TOKENS) -> tuple[list[int], list[float]]:
    """Greedy tokens and their logprobs through llama.cpp's multimodal helper on a plain
    context (``text`` with ``MARKER`` where each image goes)."""
    import llama_cpp as lc
    import llama_cpp.mtmd_cpp as mt

    mparams = lc.llama_model_default_params()
    mparams.n_gpu_layers = 0
    model = lc.llama_model_load_from_file(str(files[0]).encode(), mparams)
    params = mt.mtmd_context_params_default()
    params.use_gpu, params.n_threads, params.print_timings, params.warmup = False, 2, False, False
    mctx = mt.mtmd_init_from_file(str(files[1]).encode(), model, params)
    cparams = lc.llama_context_default_params()
    cparams.n_ctx, cparams.n_batch, cparams.n_ubatch = 2048, 64, 64
    cparams.n_threads = cparams.n_threads_batch = 2
    ctx = lc.llama_init_from_model(model, cparams)
    chunks = _tokenize(mt, mctx, text.replace(MARKER, mt.mtmd_default_marker().decode()), images)
    try:
        n_past = lc.llama_pos(0)
        assert mt.mtmd_helper_eval_chunks(mctx, ctx, chunks, 0, 0, 64, True, ctypes.byref(n_past)) == 0
        pos = n_past.value
        batch = TokenBatch(1)
        tokens, lps = [], []
        n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(model))
        for _ in range(n):
            logits = np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).astype(np.float64)
            tok = int(np.argmax(logits))
            tokens.append(tok)
            lps.append(float(logits[tok] - logits.max() - math.log(np.exp(logits - logits.max()).sum())))
            batch.clear()
            batch.add([tok], pos, 0, True)
            assert lc.llama_decode(ctx, batch.prepare()) == 0
            pos += 1
    finally:
        mt.mtmd_input_chunks_free(chunks)
        lc.llama_free(ctx)
        mt.mtmd_free(mctx)
        lc.llama_model_free(model)
    return tokens, lps


def _tokenize(mt, mctx, text: str, images: list[np.ndarray]):
    bitmaps = []
    for im in images:
        h, w, _ = im.shape
        buf = (ctypes.c_uint8 * im.size).from_buffer_copy(np.ascontiguousarray(im).tobytes())
        bitmaps.append(mt.mtmd_bitmap_init(w, h, buf))
    chunks = mt.mtmd_input_chunks_init()
    data = text.encode()
    inp = mt.mtmd_input_text(data, len(data), True, True)
    arr = (mt.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
    try:
        assert mt.mtmd_tokenize(mctx, chunks, ctypes.byref(inp), arr, len(bitmaps)) == 0
    finally:
        for b in bitmaps:
            mt.mtmd_bitmap_free(b)
    return chunks


def prepare(backend, text: str, media: list[Media]):
    return backend.projector.prepare(text, media, True, True, backend.n_batch)


#: a state restored from the host tier lands in other cells than an uncached run's (the other
#: prompt's held partial block is still on the device), and llama.cpp's results depend on where
#: the cells lie (the same prompt decoded at other cells: logits up to 0.75 apart on SmolLM2):
#: logprobs up to 1e-2 apart here; the greedy tokens must be the same
RESTORED_TOL = 2e-2


def same(got: tuple[list[int], list[float]], want: tuple[list[int], list[float]], tol: float = 2e-3) -> None:
    assert got[0] == want[0]
    assert np.allclose(got[1], want[1], atol=tol), (got[1], want[1])


ONE = f"Here is a picture: {MARKER} What is in it?"
TWO = f"Look at {MARKER} and then at {MARKER} - which one is brighter?"


def test_an_image_is_placed_on_its_grid_as_libmtmd_lays_it_out(backend):
    tokens, layout = prepare(backend, ONE, [Media(IMAGE, png(1, WIDE))])
    (span,) = layout.spans
    nx, ny = qwen2vl_grid(*WIDE)
    assert span.end - span.start == nx * ny and span.n_pos == max(nx, ny) and span.whole
    p0 = layout.pos_of(span.start)
    assert p0 == span.start  # only text before it
    pos = span.positions(p0, 0, nx * ny)
    rows, cols = np.divmod(np.arange(nx * ny), nx)
    assert (pos == np.stack([np.full(nx * ny, p0), p0 + rows, p0 + cols, np.zeros(nx * ny)])).all()
    # every embedding of it sits at p0; the text after it goes on max(nx, ny) later
    assert {layout.pos_of(i) for i in range(span.start, span.end)} == {p0}
    assert layout.pos_of(span.end) == p0 + max(nx, ny)
    assert layout.pos_of(len(tokens)) == len(tokens) - nx * ny + max(nx, ny)


@pytest.mark.parametrize("text, images", [(ONE, [(1, WIDE)]), (TWO, [(1, WIDE), (2, TALL)]), (ONE, [(6, BIG)])],
                         ids=["one", "two", "more-than-a-batch"])
def test_the_engine_gives_llama_cpps_tokens_and_logits(backend, files, text, images):
    tokens, layout = prepare(backend, text, [Media(IMAGE, png(s, size)) for s, size in images])
    assert len(layout.spans) == len(images)
    e = engine(backend)
    e.add_request("a", tokens, greedy(), media=layout)
    same(run(e)["a"], reference(files, text, [pixels(s, size) for s, size in images]))


def test_text_alone_on_an_m_rope_model_is_unchanged(backend, files):
    text = "The quick brown fox jumps over the lazy dog, and then"
    e = engine(backend)
    e.add_request("t", backend.tokenize(text), greedy())
    same(run(e)["t"], reference(files, text, []))


@pytest.mark.parametrize("host_mib", [0, 64])
def test_the_same_image_resent_comes_from_the_cache_whole(backend, host_mib):
    """The next turn re-sends the image: its cells (and all before them) come from the cache, from
    the device or, once another prompt has pushed them off it, from the host tier; the tokens
    are those of an uncached run."""
    first = ONE
    second = ONE + " It looks like a grid of coloured squares. And what colour is the corner?"
    media = [Media(IMAGE, png(1, WIDE))]
    tokens2, layout2 = prepare(backend, second, media)
    uncached = engine(backend, prefix_cache=False)
    uncached.add_request("u", tokens2, greedy(), media=layout2)
    want = run(uncached)["u"]

    e = engine(backend, host_mib=host_mib)
    tokens1, layout1 = prepare(backend, first, media)
    e.add_request("a", tokens1, greedy(), media=layout1)
    run(e)
    if host_mib:  # another prompt's admission trims the idle blocks off the device
        e.add_request("x", backend.tokenize("Something else entirely, to push the cache off the device."), greedy(2))
        run(e)
    tokens2, layout2 = prepare(backend, second, media)
    span = layout2.spans[0]
    r = e.add_request("b", tokens2, greedy(), media=layout2)
    got = run(e)["b"]
    assert r.cached_tokens >= span.end  # the image and all before it
    assert e.kv.host is None or e.kv.host.hit_tokens == r.cached_tokens  # restored from the host tier
    same(got, want, tol=RESTORED_TOL if host_mib else 2e-3)


@pytest.mark.parametrize("host_mib", [0, 64])
def test_a_prefix_that_would_end_inside_an_image_stops_before_it(backend, host_mib):
    """The same text and image, then other text: the matching blocks end inside the image, whose
    cells cannot be cut there; the hit stops at the last block boundary before the image."""
    media = [Media(IMAGE, png(3, WIDE))]
    for k in range(BLOCK):  # a lead whose length puts a block boundary inside the image
        lead = "A long opening sentence that puts the image past the first block:" + " so" * k + " "
        a_text, b_text = lead + MARKER + " Red?", lead + MARKER + " Is it mostly blue or green, or else?"
        tokens_a, layout_a = prepare(backend, a_text, media)
        tokens_b, layout_b = prepare(backend, b_text, media)
        span = layout_b.spans[0]
        shared = next(i for i, (x, y) in enumerate(zip(tokens_a, tokens_b)) if x != y)
        if span.start >= BLOCK and span.start < shared // BLOCK * BLOCK < span.end:
            break
    assert span.start < shared // BLOCK * BLOCK < span.end <= shared  # the full blocks they share end inside it

    uncached = engine(backend, prefix_cache=False)
    uncached.add_request("u", tokens_b, greedy(), media=layout_b)
    want = run(uncached)["u"]

    e = engine(backend, host_mib=host_mib)
    e.add_request("a", tokens_a, greedy(), media=layout_a)
    run(e)
    if host_mib:  # from the host tier: the saved state goes in whole, then is cut before the image
        e.add_request("x", backend.tokenize("Something else entirely, to push the cache off the device."), greedy(2))
        run(e)
    tokens_b, layout_b = prepare(backend, b_text, media)
    r = e.add_request("b", tokens_b, greedy(), media=layout_b)
    got = run(e)["b"]
    assert r.cached_tokens == span.start // BLOCK * BLOCK
    assert e.kv.host is None or e.kv.host.hit_tokens == r.cached_tokens
    same(got, want, tol=RESTORED_TOL if host_mib else 2e-3)


def test_two_different_images_never_share_cells(backend):
    """Two prompts alike but for their image: nothing of the image, nor after it, is reused."""
    lead = "A long opening sentence that puts the image past the first block of sixteen tokens: "
    text = lead + MARKER + " What is in this picture, and what colours does it have?"
    e = engine(backend, host_mib=0)
    ta, la = prepare(backend, text, [Media(IMAGE, png(4, WIDE))])
    e.add_request("a", ta, greedy(), media=la)
    run(e)
    tb, lb = prepare(backend, text, [Media(IMAGE, png(5, WIDE))])
    r = e.add_request("b", tb, greedy(), media=lb)
    got = run(e)["b"]
    assert r.cached_tokens <= lb.spans[0].start
    alone = engine(backend, prefix_cache=False)
    tb, lb = prepare(backend, text, [Media(IMAGE, png(5, WIDE))])
    alone.add_request("b", tb, greedy(), media=lb)
    same(got, run(alone)["b"])


def test_requests_with_images_of_other_grids_batched_give_the_tokens_of_each_alone(backend):
    prompts = {
        "wide": (ONE, [(1, WIDE)]),
        "tall": (f"Now this one, taller than wide: {MARKER} Describe it.", [(2, TALL)]),
        "two": (TWO, [(2, TALL), (1, WIDE)]),
        "text": ("No picture here, only a question about the weather today?", []),
    }

    def add(e: Engine, rid: str) -> None:
        text, images = prompts[rid]
        if images:
            tokens, layout = prepare(backend, text, [Media(IMAGE, png(s, size)) for s, size in images])
            e.add_request(rid, tokens, greedy(), media=layout)
        else:
            e.add_request(rid, backend.tokenize(text), greedy())

    alone = {}
    for rid in prompts:
        e = engine(backend, host_mib=0)
        add(e, rid)
        alone[rid] = run(e)[rid]
    e = engine(backend, host_mib=0)
    for rid in prompts:
        add(e, rid)
    together = run(e)
    for rid in prompts:
        # a step's ubatch of several sequences sums in another order: the tiny random model's
        # logprobs move by a few 1e-3 (text-only ones too, less; up to 0.011 on an AMD EPYC,
        # whose kernels llama.cpp picks differently), its tokens do not
        same(together[rid], alone[rid], tol=2.5e-2)


def test_several_completions_of_one_image_prompt_share_its_cells(backend):
    """n = 2: the second completion takes the first one's blocks, the image's included, and gives
    the same greedy tokens."""
    tokens, layout = prepare(backend, TWO, [Media(IMAGE, png(1, WIDE)), Media(IMAGE, png(2, TALL))])
    e = engine(backend, host_mib=0)
    first, second = e.add_group("g", tokens, greedy(), 2, media=layout)
    out = run(e)
    assert second.cached_tokens >= layout.spans[-1].end
    same(out["g/1"], out["g"])
