"""Images and audio through the engine: the embedded SmolLM2 with tiny generated projectors
(``tests/media_models.py``), real libmtmd, real llama.cpp decodes."""

from __future__ import annotations

import io
import struct
import wave
import zlib

import numpy as np
import pytest
from PIL import Image

from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.backends.media import MediaError
from runtime.engine.engine import Engine, RequestRejected
from runtime.media import AUDIO, IMAGE, MARKER, Media
from runtime.sampling_params import SamplingParams
from tests.media_models import TOKENS_PER_AUDIO_WINDOW, TOKENS_PER_IMAGE, write_projector

SMOL_EMBD = 576


def png(seed: int, h: int = 48, w: int = 64) -> bytes:
    im = Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def wav(seconds: float, hz: float = 440.0, rate: int = 22_050, channels: int = 2) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    x = (0.3 * np.sin(2 * np.pi * hz * t) * 32767).astype(np.int16)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.repeat(x, channels).tobytes())
    return buf.getvalue()


def greedy(n: int = 8) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)


@pytest.fixture(scope="module", params=["mlp", "gemma3"])
def backend(request, smollm2_path, tmp_path_factory):
    proj = write_projector(tmp_path_factory.mktemp("proj") / f"mmproj-{request.param}.gguf", SMOL_EMBD,
                           vision=request.param, audio=True)
    b = LlamaBackend(smollm2_path, ContextConfig(n_ctx=2048, n_seq_max=8, n_batch=64))
    b.attach_projector(proj)
    b.kind = request.param  # type: ignore[attr-defined]
    yield b
    b.close()


@pytest.fixture()
def engine(backend):
    backend.clear()
    return Engine(backend, 4)


def prepare(backend, content: str, media: list[Media], history: list[dict] | None = None):
    text, add = backend.chat_text((history or []) + [{"role": "user", "content": content}])
    return backend.projector.prepare(text, media, add, True, backend.n_batch)


def run(engine: Engine) -> dict[str, str]:
    out: dict[str, str] = {}
    while engine.has_work():
        for o in engine.step():
            assert o.error is None, o.error
            out[o.request_id] = out.get(o.request_id, "") + o.text
    return out


def test_an_image_takes_its_embeddings_place_and_the_next_turn_computes_only_new_text(engine, backend):
    tokens, layout = prepare(backend, f"What is in this picture? {MARKER}", [Media(IMAGE, png(1))])
    (span,) = layout.spans
    assert span.end - span.start == TOKENS_PER_IMAGE[backend.kind]
    assert span.non_causal == (backend.kind == "gemma3")
    assert all(t < 0 for t in tokens[span.start:span.end]) and all(t >= 0 for t in tokens[:span.start])
    engine.add_request("a", tokens, greedy(), media=layout)
    first = run(engine)["a"]
    assert span.embd is not None  # the projector ran for it

    # the same image re-sent with the next turn: its cells come from the prefix cache
    history = [{"role": "user", "content": f"What is in this picture? {MARKER}"},
               {"role": "assistant", "content": first}]
    tokens2, layout2 = prepare(backend, "And its colours?", [Media(IMAGE, png(1))], history)
    assert tokens2[:span.end] == tokens[:span.end]
    r = engine.add_request("b", tokens2, greedy(), media=layout2)
    run(engine)
    assert r.cached_tokens >= layout2.spans[0].end  # the image and all before it
    assert r.cached_tokens >= (len(tokens2) - 1) // 16 * 16 - 16  # only the new text is computed
    assert layout2.spans[0].embd is None  # and the projector did not run again

    # a different image at the same place: nothing of it is reused
    tokens3, layout3 = prepare(backend, f"What is in this picture? {MARKER}", [Media(IMAGE, png(2))])
    assert tokens3[span.start:span.end] != tokens[span.start:span.end]
    r3 = engine.add_request("c", tokens3, greedy(), media=layout3)
    run(engine)
    assert r3.cached_tokens <= span.start


def test_the_same_image_request_alone_and_in_a_batch_gives_the_same_tokens(engine, backend):
    tokens, layout = prepare(backend, f"Describe {MARKER} briefly.", [Media(IMAGE, png(3))])
    engine.add_request("alone", tokens, greedy(12), media=layout)
    alone = run(engine)["alone"]
    backend.clear()
    busy = Engine(backend, 4)
    for i in range(3):  # text requests decoding beside it, and a second image request
        busy.add_request(f"text{i}", backend.tokenize(f"Count to {i + 5}:"), greedy(20))
    other_tokens, other_layout = prepare(backend, f"And this one? {MARKER}", [Media(IMAGE, png(4))])
    busy.add_request("other", other_tokens, greedy(12), media=other_layout)
    tokens2, layout2 = prepare(backend, f"Describe {MARKER} briefly.", [Media(IMAGE, png(3))])
    busy.add_request("batched", tokens2, greedy(12), media=layout2)
    assert run(busy)["batched"] == alone


def test_a_causal_image_is_decoded_in_chunks_beside_other_streams(smollm2_path, tmp_path):
    proj = write_projector(tmp_path / "mmproj.gguf", SMOL_EMBD, vision="mlp")
    b = LlamaBackend(smollm2_path, ContextConfig(n_ctx=1024, n_seq_max=4, n_batch=8))
    try:
        b.attach_projector(proj)
        e = Engine(b, 2)
        e.add_request("text", b.tokenize("One, two,"), greedy(30))
        text, add = b.chat_text([{"role": "user", "content": f"{MARKER} what is it?"}])
        tokens, layout = b.projector.prepare(text, [Media(IMAGE, png(5))], add, True, b.n_batch)
        e.add_request("img", tokens, greedy(4), media=layout)
        span = layout.spans[0]
        steps_in_image = text_tokens_meanwhile = 0
        while e.has_work():
            running = e.scheduler.running
            before = next((r.num_computed for r in running if r.request_id == "img"), 0)
            outputs = e.step()
            after = next((r.num_computed for r in e.scheduler.running if r.request_id == "img"), None)
            if after is not None and span.start <= before < span.end:
                steps_in_image += 1
                assert after - before <= 8  # never more than the step's budget
                text_tokens_meanwhile += sum(o.n_tokens for o in outputs if o.request_id == "text")
        assert steps_in_image >= 2  # 16 positions in chunks of at most 8
        assert text_tokens_meanwhile >= 2  # the other stream went on between the image's chunks
    finally:
        b.close()


def test_an_audio_clip_is_heard_and_cached(engine, backend):
    media = [Media(AUDIO, wav(1.0))]
    tokens, layout = prepare(backend, f"{MARKER} What is this sound?", media)
    (span,) = layout.spans
    assert span.kind == AUDIO and span.end - span.start == TOKENS_PER_AUDIO_WINDOW
    assert not span.non_causal  # audio is causal, even beside Gemma 3's images
    engine.add_request("a", tokens, greedy(), media=layout)
    run(engine)
    tokens2, layout2 = prepare(backend, f"{MARKER} What is this sound?", [Media(AUDIO, wav(1.0))])
    r = engine.add_request("b", tokens2, greedy(), media=layout2)
    run(engine)
    assert r.cached_tokens >= span.end


def test_two_media_in_one_prompt_keep_their_order(engine, backend):
    a, b = Media(IMAGE, png(6)), Media(IMAGE, png(7))
    tokens_ab, layout_ab = prepare(backend, f"{MARKER} then {MARKER}", [a, b])
    tokens_ba, layout_ba = prepare(backend, f"{MARKER} then {MARKER}", [b, a])
    s0, s1 = layout_ab.spans
    assert tokens_ab[s0.start:s0.end] == tokens_ba[s1.start:s1.end]
    assert tokens_ab[s1.start:s1.end] == tokens_ba[s0.start:s0.end]
    engine.add_request("ab", tokens_ab, greedy(), media=layout_ab)
    engine.add_request("ba", tokens_ba, greedy(), media=layout_ba)
    out = run(engine)
    assert set(out) == {"ab", "ba"}


def _bomb_png(w: int, h: int) -> bytes:
    """A PNG header claiming ``w`` x ``h`` pixels with a tiny compressed body."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 1024)) + chunk(b"IEND", b"")


@pytest.mark.parametrize("data, words", [
    (_bomb_png(100_000, 100_000), "pixels"),
    (png(1)[:60], "damaged or truncated"),
    (b"GIF89a" + b"\0" * 10, "damaged or truncated|not an image"),
    (b"hello, this is text", "not an image"),
    (b"RIFF\x00\x00\x00\x00WAVEfmt ", "not an image"),
])
def test_hostile_or_broken_images_are_refused_with_a_reason(backend, data, words):
    import re

    with pytest.raises(MediaError, match=re.compile(words)):
        prepare(backend, f"look: {MARKER}", [Media(IMAGE, data)])


@pytest.mark.parametrize("data, words", [
    (png(1), "PCM WAV"),
    (wav(0.5)[:30], "PCM WAV"),
    (b"RIFF" + b"\xff" * 40, "PCM WAV"),
])
def test_broken_audio_is_refused_with_a_reason(backend, data, words):
    with pytest.raises(MediaError, match=words):
        prepare(backend, f"listen: {MARKER}", [Media(AUDIO, data)])


def test_a_marker_count_that_does_not_match_the_media_is_refused(backend):
    with pytest.raises(MediaError, match="media places"):
        prepare(backend, f"{MARKER} and {MARKER}", [Media(IMAGE, png(1))])


def test_a_prompt_ending_in_a_medium_is_refused(engine, backend):
    text = f"look: {MARKER}"
    tokens, layout = backend.projector.prepare(text, [Media(IMAGE, png(1))], True, True, backend.n_batch)
    if layout.spans[-1].end < len(tokens):  # Gemma 3's projector closes an image with text of its own
        assert backend.kind == "gemma3"
        engine.add_request("x", tokens, greedy(), media=layout)
        assert run(engine)["x"]
        return
    with pytest.raises(RequestRejected, match="ends with an image"):
        engine.add_request("x", tokens, greedy(), media=layout)


def test_a_large_photo_is_scaled_to_the_longest_side_a_projector_needs():
    from runtime.backends.media import MAX_SIDE, decode_image

    im = Image.new("RGB", (6000, 4000), (200, 30, 40))
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=80)
    w, h, rgb = decode_image(buf.getvalue())
    assert max(w, h) <= MAX_SIDE and abs(w / h - 1.5) < 0.01 and len(rgb) == w * h * 3
    assert rgb[:3] == bytes(rgb[:3]) and abs(rgb[0] - 200) < 8  # the colour survives


def test_a_projector_failure_ends_only_its_own_request(engine, backend):
    tokens, layout = prepare(backend, f"Describe {MARKER}", [Media(IMAGE, png(8))])

    def broken():
        raise RuntimeError("the projector failed on this medium (libmtmd code 1)")

    layout.spans[0].encode = broken
    engine.add_request("img", tokens, greedy(), media=layout)
    engine.add_request("text", backend.tokenize("One, two, three,"), greedy(6))
    errors, texts = {}, {}
    while engine.has_work():
        for o in engine.step():
            if o.error:
                errors[o.request_id] = o.error
            texts[o.request_id] = texts.get(o.request_id, "") + o.text
    assert "projector failed" in errors["img"] and "text" not in errors and texts["text"]


def test_another_projector_gives_the_same_image_other_positions(smollm2_path, tmp_path, backend):
    if backend.kind != "mlp":
        pytest.skip("compared with a projector of the same kind: the same layout, other ids")
    other = write_projector(tmp_path / "mmproj-other.gguf", SMOL_EMBD, vision="mlp", seed=7)
    b = LlamaBackend(smollm2_path, ContextConfig(n_ctx=512, n_seq_max=2, n_batch=64))
    try:
        b.attach_projector(other)
        text, add = b.chat_text([{"role": "user", "content": f"{MARKER} what is it?"}])
        mine, layout = b.projector.prepare(text, [Media(IMAGE, png(1))], add, True, b.n_batch)
        theirs, layout2 = backend.projector.prepare(text, [Media(IMAGE, png(1))], add, True, backend.n_batch)
        s = layout.spans[0]
        assert mine[:s.start] == theirs[:s.start] and mine[s.start:s.end] != theirs[s.start:s.end]
    finally:
        b.close()
