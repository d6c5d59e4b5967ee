"""Media in requests that answered wrongly: Hearth's own media marker typed as text beside an
image made a remote model's request a 500 (StopIteration inside a coroutine); bytes that are no
image got a 400 whose message carried the worker's heap address (``<_io.BytesIO object at
0x...>``). Both are 400s that say what was wrong."""

from __future__ import annotations

import base64
import os
import re
import shutil

import openai
import pytest

from runtime.media import MARKER
from tests.engine.test_media import png
from tests.media_models import write_projector
from tests.remote.test_faults import add, oai
from tests.server.conftest import live_server


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def _message(text: str, image: bytes) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text},
                                        {"type": "image_url", "image_url": {"url": data_url(image)}}]}


@pytest.mark.parametrize("text", [f"what is {MARKER} here?", MARKER * 3])
async def test_the_media_marker_typed_beside_an_image_is_a_400_for_a_remote_model(hearth, scripted, text):
    up = await scripted("ok")
    h = await hearth()
    await add(h, "box", up.url)
    client = oai(h)
    with pytest.raises(openai.BadRequestError) as e:
        await client.chat.completions.create(model="m1", max_tokens=4, messages=[_message(text, png(1))])
    assert e.value.code == "invalid_media" and "marks where a medium goes" in str(e.value)
    assert up.requests == []  # refused before anything went upstream
    # the same image without the marker goes to the upstream as an OpenAI image part
    reply = await client.chat.completions.create(model="m1", max_tokens=4, messages=[_message("what?", png(1))])
    assert reply.choices[0].message.content == "Hello world!"
    parts = up.requests[-1]["body"]["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url"]


@pytest.fixture(scope="module")
def vlm_server(smollm2_path, tmp_path_factory):
    """The embedded SmolLM2 beside a tiny generated projector: a model that reads images."""
    folder = tmp_path_factory.mktemp("vlm")
    model = folder / "SmolTiny-VL-Q8_0.gguf"
    try:
        os.link(smollm2_path, model)
    except OSError:
        shutil.copy(smollm2_path, model)
    write_projector(folder / "mmproj-SmolTiny-VL-f16.gguf", 576, vision="mlp")
    s = live_server("--parallel", "2", "--ctx", "1024", "--models-dir", str(folder))
    s.vlm = str(model)
    yield s
    s.stop()


@pytest.mark.parametrize("data", [b"plain text, not a picture", b"\x00" * 64, b"GIF8 but no more"])
def test_bytes_that_are_no_image_get_a_400_without_an_object_repr(vlm_server, data):
    client = openai.OpenAI(base_url=f"{vlm_server.url}/v1", api_key="unused", max_retries=0, timeout=300)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=vlm_server.vlm, max_tokens=2, messages=[_message("look", data)])
    message = str(e.value)
    assert e.value.code == "invalid_media" and ("not an image" in message or "damaged" in message), message
    assert not re.search(r"0x[0-9a-f]{6,}|<_io\.|object at", message), message
