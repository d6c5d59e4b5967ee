"""Images in a chat: dropped on the message box they become thumbnail chips, go to a model that
reads images with the message (and again with every later turn), and show as thumbnails in
the sent message; sent to a text-only model they are explained, not failed. A real service
with the embedded SmolLM2 beside a tiny generated projector, real widgets offscreen."""

from __future__ import annotations

import os
import shutil

import pytest

from runtime.server.launcher import ServiceProcess
from tests.app.test_drop_files import _drop
from tests.engine.test_media import png, wav
from tests.media_models import write_projector


@pytest.fixture(scope="module")
def vlm_service(smollm2_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("vlm")
    model = folder / "SmolTiny-VL-Q8_0.gguf"
    try:
        os.link(smollm2_path, model)
    except OSError:
        shutil.copy(smollm2_path, model)
    write_projector(folder / "mmproj-SmolTiny-VL-f16.gguf", 576, vision="mlp", audio=True)
    s = ServiceProcess("--parallel", "2", "--ctx", "2048", "--model", str(model)).wait_ready()
    yield s
    s.stop()


def _chips(page) -> list:
    return [w for w in page.attachments.findChildren(type(page.send_button)) if w.isVisibleTo(page)]


def test_an_image_goes_to_a_vision_model_and_shows_in_the_message(driver, make_app, vlm_service, tmp_path):
    picture = tmp_path / "photo.png"
    picture.write_bytes(png(11, 120, 200))
    clip = tmp_path / "bird.wav"
    clip.write_bytes(wav(0.5))
    h = make_app(vlm_service.port)
    h.window.resize(1000, 720)
    h.window.show()
    page = h.chat_page
    errors: list = []
    h.chat.error.connect(errors.append)
    page.input.setPlainText("What is in this picture?")
    assert _drop(page.input.viewport(), [picture, clip])
    driver.until(lambda: len(page.pending) == 2, 10, "the image and the clip to be read")
    chips = _chips(page)
    assert len(chips) == 2 and chips[0].text().startswith("photo.png") and not chips[0].icon().isNull()
    assert page.input.toPlainText() == "What is in this picture?"

    page.send_button.click()
    driver.until(lambda: not h.chat.busy and h.chat.messages.rowCount() == 2, 120, "the answer")
    assert not errors, [e.text() for e in errors]
    answer = h.chat.messages.item(1)
    assert answer.content and answer.meta.get("finish") in ("stop", "length")
    # the image and the clip took their places in the prompt (16 + 15 positions beside the text)
    first_prompt = int(answer.meta["prompt_tokens"])
    assert first_prompt > 31
    widget = page.view.widget_at(0)
    thumbs = [w for w in widget.media.findChildren(type(widget.attachments)) if w.pixmap() is not None
              and not w.pixmap().isNull()]
    assert widget.media.isVisibleTo(widget) and len(thumbs) == 1 and thumbs[0].pixmap().width() == 160
    labels = [w.text() for w in widget.media.findChildren(type(widget.attachments))]
    assert "Sound clip: bird.wav" in labels
    driver.pump(0.3)
    os.makedirs(os.environ.get("HEARTH_SCREENSHOTS", str(tmp_path)), exist_ok=True)
    h.window.grab().save(os.path.join(os.environ.get("HEARTH_SCREENSHOTS", str(tmp_path)), "chat-with-image.png"))

    # the next question sends the image again: the service's cache holds it, the prompt grows by the new turn
    page.input.setPlainText("And the colours?")
    page.send_button.click()
    driver.until(lambda: not h.chat.busy and h.chat.messages.rowCount() == 4, 120, "the second answer")
    second = h.chat.messages.item(3)
    assert int(second.meta["prompt_tokens"]) > first_prompt + len(answer.content) // 8
    assert not errors, [e.text() for e in errors]


def test_an_image_for_a_text_only_model_is_explained_and_kept(driver, make_app, service, tmp_path):
    picture = tmp_path / "photo.png"
    picture.write_bytes(png(12))
    h = make_app(service.port)
    h.window.show()
    page = h.chat_page
    errors: list = []
    h.chat.error.connect(errors.append)
    driver.run(h.models.refresh_available())
    driver.until(lambda: page.header.row("smollm2-135m") is not None, 30, "the model list")
    page.header.choose("smollm2-135m")
    assert page.header.chat_model() == "smollm2-135m"
    page.input.setPlainText("Describe this.")
    assert _drop(page.input.viewport(), [picture])
    driver.until(lambda: len(page.pending) == 1, 10, "the image to be read")
    page.send_button.click()
    driver.until(lambda: bool(errors), 10, "the explanation")
    assert "reads text only" in errors[-1].text() and "vision" in errors[-1].text()
    assert h.chat.messages.rowCount() == 0 and len(page.pending) == 1  # nothing sent, nothing lost
    assert page.input.toPlainText() == "Describe this."

    # where the app cannot tell (the service's default model), the service's refusal is explained the same way
    page.header.choose("")
    page.send_button.click()
    driver.until(lambda: not h.chat.busy and len(errors) >= 2, 60, "the service's refusal")
    assert "reads text only" in errors[-1].text(), errors[-1].text()
