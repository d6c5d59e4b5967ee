"""Images and audio through all four wire formats, with the official SDKs, against a real
service: the embedded SmolLM2 in a folder beside a tiny generated projector (vision + audio)."""

from __future__ import annotations

import base64
import http.server
import os
import shutil
import threading
from pathlib import Path

import anthropic
import httpx
import ollama
import pytest
from openai import BadRequestError, OpenAI

from tests.engine.test_media import _bomb_png, png, wav
from tests.media_models import (
    QWEN2VL_EMBD, TOKENS_PER_AUDIO_WINDOW, TOKENS_PER_IMAGE, qwen2vl_grid, write_projector, write_qwen2vl_projector,
    write_qwen2vl_text,
)
from tests.server.conftest import live_server


@pytest.fixture(scope="module")
def vlm(smollm2_path, tmp_path_factory) -> str:
    """A model folder as Hugging Face's vision repositories lay it out: model + mmproj."""
    folder = tmp_path_factory.mktemp("smolvlm")
    model = folder / "SmolTiny-VL-Q8_0.gguf"
    try:
        os.link(smollm2_path, model)
    except OSError:
        shutil.copy(smollm2_path, model)
    write_projector(folder / "mmproj-SmolTiny-VL-f16.gguf", 576, vision="mlp", audio=True)
    return str(model)


@pytest.fixture(scope="module")
def mismatched(smollm2_path, tmp_path_factory) -> str:
    """A model beside a projector made for another model (its width is 64, SmolLM2's 576)."""
    folder = tmp_path_factory.mktemp("mismatched")
    model = folder / "Mismatched-Q8_0.gguf"
    try:
        os.link(smollm2_path, model)
    except OSError:
        shutil.copy(smollm2_path, model)
    write_projector(folder / "mmproj-other-f16.gguf", 64, vision="mlp")
    return str(model)


@pytest.fixture(scope="module")
def qwen_vl(smollm2_path, tmp_path_factory) -> str:
    """A tiny model of the Qwen2-VL architecture (M-RoPE: an image on a 2-D grid of positions)
    with its projector and Qwen2.5's chat template, laid out as the Hub's repositories are."""
    folder = tmp_path_factory.mktemp("qwen2vl")
    template = (Path(__file__).resolve().parents[2] / "tests" / "chat" / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text()
    model = write_qwen2vl_text(folder / "Qwen2-VL-Tiny-F16.gguf", smollm2_path, chat_template=template)
    write_qwen2vl_projector(folder / "mmproj-Qwen2-VL-Tiny-f16.gguf", QWEN2VL_EMBD)
    return str(model)


@pytest.fixture(scope="module")
def server(vlm, mismatched, qwen_vl):
    s = live_server("--parallel", "4", "--ctx", "2048", "--models-dir", os.path.dirname(vlm),
                    "--models-dir", os.path.dirname(mismatched), "--models-dir", os.path.dirname(qwen_vl))
    yield s
    s.stop()


@pytest.fixture()
def oai(server):
    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def image_message(seed: int = 1, text: str = "What is in this picture?") -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text},
                                        {"type": "image_url", "image_url": {"url": data_url(png(seed))}}]}


def test_openai_chat_reads_an_image_and_a_second_turn_reuses_it(oai, vlm):
    first = oai.chat.completions.create(model=vlm, messages=[image_message()], max_tokens=8, temperature=0)
    assert first.choices[0].message.content
    text_only = oai.chat.completions.create(model=vlm, messages=[{"role": "user", "content": "What is in this picture?"}],
                                            max_tokens=1, temperature=0)
    # the image takes its embeddings' positions in the prompt
    assert first.usage.prompt_tokens == text_only.usage.prompt_tokens + TOKENS_PER_IMAGE["mlp"]
    second = oai.chat.completions.create(
        model=vlm, max_tokens=8, temperature=0,
        messages=[image_message(), {"role": "assistant", "content": first.choices[0].message.content},
                  {"role": "user", "content": "Tell me more."}])
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert cached >= first.usage.prompt_tokens - 16  # the image and everything before it came from the cache


def test_openai_chat_streams_with_an_audio_clip(oai, vlm):
    stream = oai.chat.completions.create(
        model=vlm, max_tokens=6, temperature=0, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": b64(wav(1.0)), "format": "wav"}},
            {"type": "text", "text": "What do you hear?"}]}])
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = chunks[-1].usage
    assert usage.prompt_tokens > TOKENS_PER_AUDIO_WINDOW


def test_responses_reads_an_input_image(oai, vlm):
    r = oai.responses.create(model=vlm, max_output_tokens=16, temperature=0, input=[{
        "role": "user", "content": [{"type": "input_text", "text": "Describe it."},
                                    {"type": "input_image", "image_url": data_url(png(2))}]}])
    assert r.status in ("completed", "incomplete") and r.output_text
    assert r.usage.input_tokens > TOKENS_PER_IMAGE["mlp"]


def test_anthropic_messages_read_an_image_block(server, vlm):
    c = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300)
    m = c.messages.create(model=vlm, max_tokens=8, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(png(3))}},
        {"type": "text", "text": "What is this?"}]}])
    assert m.content[0].text
    counted = c.messages.count_tokens(model=vlm, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(png(3))}},
        {"type": "text", "text": "What is this?"}]}])
    assert counted.input_tokens == m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0)


def test_ollama_chat_and_generate_read_images(server, vlm):
    client = ollama.Client(host=server.url, timeout=300)
    r = client.chat(model=vlm, messages=[{"role": "user", "content": "What is this?", "images": [png(4)]}],
                    options={"num_predict": 6, "temperature": 0})
    assert r.message.content and r.prompt_eval_count > TOKENS_PER_IMAGE["mlp"]
    g = client.generate(model=vlm, prompt="Describe it.", images=[png(4)], options={"num_predict": 6, "temperature": 0})
    assert g.response
    show = client.show(vlm)
    assert "vision" in show.capabilities and "audio" in show.capabilities


def test_models_list_marks_the_model_vision_and_audio(oai, server, vlm):
    shown = httpx.post(f"{server.url}/api/show", json={"model": vlm}, timeout=60).json()
    assert {"vision", "audio"} <= set(shown["capabilities"])


BAD = [
    ("not base64", {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@not base64@@@"}}, "base64"),
    ("web URL", {"type": "image_url", "image_url": {"url": "http://127.0.0.1:1/cat.png"}}, "does not fetch"),
    ("not an image type", {"type": "image_url", "image_url": {"url": data_url(b"hi", "text/plain")}}, "not an image"),
    ("bomb", {"type": "image_url", "image_url": {"url": data_url(_bomb_png(100_000, 100_000))}}, "pixels"),
    ("truncated", {"type": "image_url", "image_url": {"url": data_url(png(1)[:70])}}, "damaged or truncated"),
    ("text as png", {"type": "image_url", "image_url": {"url": data_url(b"plain text, not a picture")}}, "not an image"),
    ("mp3", {"type": "input_audio", "input_audio": {"data": b64(b"ID3...."), "format": "mp3"}}, "wav"),
    ("bad wav", {"type": "input_audio", "input_audio": {"data": b64(b"RIFF1234WAVEjunk"), "format": "wav"}}, "WAV"),
]


@pytest.mark.parametrize("part, words", [(p, w) for _, p, w in BAD], ids=[n for n, _, _ in BAD])
def test_a_bad_medium_is_a_400_that_says_why_and_the_service_goes_on(oai, vlm, part, words):
    with pytest.raises(BadRequestError) as e:
        oai.chat.completions.create(model=vlm, max_tokens=2, messages=[
            {"role": "user", "content": [{"type": "text", "text": "look"}, part]}])
    assert words.lower() in str(e.value).lower()
    ok = oai.chat.completions.create(model=vlm, max_tokens=2, messages=[image_message(9)])
    assert ok.choices[0].finish_reason in ("stop", "length")


def test_too_many_images_are_refused_before_any_is_decoded(oai, vlm):
    parts = [{"type": "image_url", "image_url": {"url": data_url(png(1))}}] * 17
    with pytest.raises(BadRequestError, match="at most 16"):
        oai.chat.completions.create(model=vlm, max_tokens=2, messages=[{"role": "user", "content": parts}])


def test_a_text_only_model_explains_that_it_reads_no_images(oai):
    with pytest.raises(BadRequestError) as e:
        oai.chat.completions.create(model="smollm2-135m", max_tokens=2, messages=[image_message()])
    assert e.value.code == "media_not_supported" and "text only" in str(e.value)


@pytest.fixture(scope="module")
def picture_site(tmp_path_factory):
    """A loopback web server with a picture, an oversized file and nothing else."""
    from runtime.media import MAX_MEDIA_BYTES

    folder = tmp_path_factory.mktemp("site")
    (folder / "cat.png").write_bytes(png(21))
    (folder / "huge.png").write_bytes(b"\x89PNG" + b"\0" * MAX_MEDIA_BYTES)
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(folder))  # noqa: E731
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{site.server_address[1]}"
    site.shutdown()


def test_web_addresses_are_fetched_only_where_the_service_allows_it(oai, vlm, picture_site, monkeypatch):
    part = {"type": "image_url", "image_url": {"url": f"{picture_site}/cat.png"}}
    with pytest.raises(BadRequestError, match="does not fetch images from the web"):
        oai.chat.completions.create(model=vlm, max_tokens=2, messages=[{"role": "user", "content": [part]}])
    # the site is on 127.0.0.1, which a service never fetches from but for its tests (test-only switch;
    # tests/security/test_media_fetch.py checks the address rules)
    monkeypatch.setenv("HEARTH_TEST_FETCH_LOOPBACK", "1")
    s = live_server("--parallel", "2", "--ctx", "2048", "--models-dir", os.path.dirname(vlm), "--fetch-media-urls")
    try:
        client = OpenAI(base_url=f"{s.url}/v1", api_key="unused", max_retries=0, timeout=300)
        r = client.chat.completions.create(model=vlm, max_tokens=4, temperature=0, messages=[
            {"role": "user", "content": [part, {"type": "text", "text": "What is it?"}]}])
        assert r.usage.prompt_tokens > TOKENS_PER_IMAGE["mlp"]
        c = anthropic.Anthropic(base_url=s.url, api_key="unused", max_retries=0, timeout=300)
        m = c.messages.create(model=vlm, max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": f"{picture_site}/cat.png"}}]}])
        assert m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) > TOKENS_PER_IMAGE["mlp"]
        with pytest.raises(BadRequestError) as e:  # a model that reads no images: told so, nothing fetched
            client.chat.completions.create(model="smollm2-135m", max_tokens=2,
                                           messages=[{"role": "user", "content": [part]}])
        assert e.value.code == "media_not_supported" and "text only" in str(e.value)
        for path in ("/missing.png", "/huge.png"):  # every failure says the same (the reason is logged)
            bad = {"type": "image_url", "image_url": {"url": f"{picture_site}{path}"}}
            with pytest.raises(BadRequestError, match="could not be fetched"):
                client.chat.completions.create(model=vlm, max_tokens=2, messages=[{"role": "user", "content": [bad]}])
        with pytest.raises(BadRequestError, match="could not be fetched"):
            client.chat.completions.create(model=vlm, max_tokens=2, messages=[{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "http://127.0.0.1:1/nothing.png"}}]}])
        assert httpx.get(f"{s.url}/health", timeout=10).status_code == 200
    finally:
        s.stop()


def test_a_projector_that_does_not_fit_its_model_leaves_it_a_text_model(oai, mismatched):
    text = oai.chat.completions.create(model=mismatched, max_tokens=3, messages=[{"role": "user", "content": "Hi"}])
    assert text.choices[0].finish_reason in ("stop", "length")
    with pytest.raises(BadRequestError) as e:
        oai.chat.completions.create(model=mismatched, max_tokens=2, messages=[image_message()])
    assert e.value.code == "media_not_supported" and "projector cannot be used" in str(e.value)


def test_a_sound_clip_through_responses_anthropic_and_ollama(server, oai, vlm):
    clip = wav(1.0)
    r = oai.responses.create(model=vlm, max_output_tokens=16, temperature=0, input=[{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": b64(clip), "format": "wav"}},
        {"type": "input_text", "text": "What is this sound?"}]}])
    assert r.output_text and r.usage.input_tokens > TOKENS_PER_AUDIO_WINDOW
    # Anthropic's API has no sound block: Hearth reads one shaped like its image block
    c = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300)
    m = c.messages.create(model=vlm, max_tokens=8, messages=[{"role": "user", "content": [
        {"type": "audio", "source": {"type": "base64", "media_type": "audio/wav", "data": b64(clip)}},
        {"type": "text", "text": "What is this sound?"}]}])
    assert m.content[0].text and m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) > TOKENS_PER_AUDIO_WINDOW
    # Ollama's API has only ``images``: a WAV file among them is heard, not looked at
    o = ollama.Client(host=server.url, timeout=300).chat(
        model=vlm, messages=[{"role": "user", "content": "What is this sound?", "images": [clip]}],
        options={"num_predict": 6, "temperature": 0})
    assert o.message.content and o.prompt_eval_count > TOKENS_PER_AUDIO_WINDOW


def test_a_qwen_vl_model_reads_an_image_through_all_four_formats(server, oai, qwen_vl):
    """M-RoPE images (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) answer through OpenAI chat, Responses,
    Anthropic and Ollama; the prompt counts the image's grid of tokens (a 64x32 picture: 8x4),
    and the same image again is read from the prefix cache up to the block before it."""
    picture = png(7, h=32, w=64)
    nx, ny = qwen2vl_grid(64, 32)
    text_only = oai.chat.completions.create(model=qwen_vl, max_tokens=1, temperature=0,
                                            messages=[{"role": "user", "content": "What is in this picture?"}])
    base = text_only.usage.prompt_tokens
    msg = {"role": "user", "content": [{"type": "text", "text": "What is in this picture?"},
                                       {"type": "image_url", "image_url": {"url": data_url(picture)}}]}
    first = oai.chat.completions.create(model=qwen_vl, messages=[msg], max_tokens=4, temperature=0)
    assert first.choices[0].finish_reason in ("stop", "length")
    assert first.usage.prompt_tokens >= base + nx * ny  # the grid's tokens (and the vision markers)
    again = oai.chat.completions.create(model=qwen_vl, messages=[msg], max_tokens=4, temperature=0)
    assert again.choices[0].message.content == first.choices[0].message.content
    assert again.usage.prompt_tokens_details.cached_tokens > 0
    r = oai.responses.create(model=qwen_vl, max_output_tokens=4, temperature=0, input=[{
        "role": "user", "content": [{"type": "input_text", "text": "Describe it."},
                                    {"type": "input_image", "image_url": data_url(picture)}]}])
    assert r.status in ("completed", "incomplete") and r.usage.input_tokens > nx * ny
    c = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300)
    m = c.messages.create(model=qwen_vl, max_tokens=4, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(picture)}},
        {"type": "text", "text": "What is this?"}]}])
    assert m.stop_reason in ("end_turn", "max_tokens")
    assert m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) > nx * ny
    o = ollama.Client(host=server.url, timeout=300).chat(
        model=qwen_vl, messages=[{"role": "user", "content": "What is this?", "images": [picture]}],
        options={"num_predict": 4, "temperature": 0})
    assert o.done and o.prompt_eval_count > nx * ny
