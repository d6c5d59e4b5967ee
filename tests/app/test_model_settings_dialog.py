"""A model's settings on the Models page, against a real service: the row's Settings button opens
its load settings (context, GPU layers, KV cache type: stored, shown as the model is loaded, and
back to automatic) and its chat template (shown read-only, a chosen file replaces it or the
service's reason shows when it cannot, and the model's own comes back)."""

from __future__ import annotations

import asyncio
import json

import httpx

from PySide6.QtWidgets import QFileDialog

from app.ui.template_pane import NO_TEMPLATE, ORIGINS

CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_show_replace_and_reset_a_template(service, driver, data_dir, gemma_path, tmp_path, monkeypatch):
    from app.api_client import ApiClient
    from app.model_settings import ModelSettings
    from app.models import ModelStoreService
    from app.ui.models_page import ModelsPage

    client = ApiClient(service.url)
    tasks: list[asyncio.Future] = []
    run = lambda coro: tasks.append(asyncio.ensure_future(coro))  # noqa: E731 - the app's spawn, in small
    models = ModelStoreService(client, data_dir)
    page = ModelsPage(models, run, None, ModelSettings(client, data_dir))
    driver.run(models.refresh_local())
    rows = {w.model.id: w for w in page.local_list.rows}
    assert rows["smollm2-135m"].settings_button.isEnabled()

    rows["smollm2-135m"].settings_button.click()  # the model's own, read-only
    assert page.settings_dialog is not None and page.settings_dialog.isVisible()
    dialog = page.settings_dialog.template
    driver.until(lambda: dialog.text.toPlainText() != "", 30, "the template")
    assert "<|im_start|>" in dialog.text.toPlainText() and dialog.text.isReadOnly()
    assert dialog.origin.text() == ORIGINS["model"] and not dialog.reset_button.isEnabled()

    rows["gemma-3-270m"].settings_button.click()  # a model without one: the plain fallback is said
    page.settings_dialog.tabs.setCurrentWidget(page.settings_dialog.template)
    dialog = page.settings_dialog.template
    driver.until(lambda: dialog.load_button.isEnabled(), 30, lambda: f"the template ({dialog.error.text()})")
    assert dialog.origin.text() == NO_TEMPLATE and dialog.text.toPlainText() == ""

    broken, good = tmp_path / "broken.jinja", tmp_path / "chatml.jinja"
    broken.write_text("{% for m in messages %}{{ m.content }")
    good.write_text(CHATML)
    chosen = [str(broken)]
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (chosen[0], ""))
    dialog.load_button.click()  # refused: the service's reason shows, nothing changes
    driver.until(lambda: dialog.error.isVisible(), 30, "the refusal")
    assert "not valid Jinja" in dialog.error.text() and dialog.text.toPlainText() == ""
    chosen[0] = str(good)
    dialog.load_button.click()
    driver.until(lambda: dialog.text.toPlainText() == CHATML, 30, "the replacement")
    assert not dialog.error.isVisible() and dialog.origin.text().startswith(ORIGINS["stored"])
    assert dialog.reset_button.isEnabled()
    assert (data_dir / "templates" / "gemma-3-270m.jinja").read_text() == CHATML

    dialog.reset_button.click()
    driver.until(lambda: dialog.origin.text().startswith(NO_TEMPLATE), 30, "the model's own again")
    assert not (data_dir / "templates" / "gemma-3-270m.jinja").exists() and not dialog.reset_button.isEnabled()
    page.settings_dialog.close()
    driver.run(asyncio.gather(*tasks))
    driver.run(client.close())


def test_load_settings_are_stored_shown_and_reset(service, driver, data_dir, gemma_path):
    from app.api_client import ApiClient
    from app.model_settings import ModelSettings
    from app.models import ModelStoreService
    from app.ui.load_settings_pane import AUTOMATIC
    from app.ui.models_page import ModelsPage

    client = ApiClient(service.url)
    tasks: list[asyncio.Future] = []
    run = lambda coro: tasks.append(asyncio.ensure_future(coro))  # noqa: E731
    models = ModelStoreService(client, data_dir)
    page = ModelsPage(models, run, None, ModelSettings(client, data_dir))
    driver.run(models.refresh_local())
    rows = {w.model.id: w for w in page.local_list.rows}
    rows["gemma-3-270m"].settings_button.click()
    dialog = page.settings_dialog
    assert dialog is not None and dialog.tabs.currentWidget() is dialog.load  # the Load tab first
    pane = dialog.load
    driver.until(lambda: pane.save_button.isEnabled(), 30, lambda: f"the settings ({pane.error.text()})")
    assert pane.ctx.text() == AUTOMATIC and pane.gpu_layers.text() == AUTOMATIC
    assert pane.kv_type.currentText() == AUTOMATIC and not pane.reset_button.isEnabled()
    try:
        pane.ctx.setValue(1536)
        pane.kv_type.setCurrentIndex(pane.kv_type.findData("q8_0"))
        pane.save_button.click()
        driver.until(lambda: pane.reset_button.isEnabled(), 30, lambda: f"the saved settings ({pane.error.text()})")
        assert pane.now.text().startswith("Saved")
        stored = json.loads((data_dir / "model-settings" / "gemma-3-270m.json").read_text())
        assert stored == {"ctx": 1536, "gpu_layers": None, "kv_type": "q8_0"}
        # the next load uses them, and the pane says so
        r = httpx.post(f"{service.url}/v1/chat/completions", timeout=120, json={
            "model": "gemma-3-270m", "max_tokens": 1, "messages": [{"role": "user", "content": "Hi"}]})
        assert r.status_code == 200, r.text
        driver.run(pane.refresh())
        assert "context of 1,536 tokens" in pane.now.text() and "q8_0 KV cache" in pane.now.text(), pane.now.text()
        pane.ctx.setValue(100)  # below the service's smallest: its reason shows, nothing changes
        pane.save_button.click()
        driver.until(lambda: pane.error.isVisible(), 30, "the refusal")
        assert "'ctx'" in pane.error.text()
    finally:
        pane.reset_button.click()
        driver.until(lambda: not pane.reset_button.isEnabled(), 30, "all automatic again")
    assert pane.ctx.text() == AUTOMATIC and not (data_dir / "model-settings" / "gemma-3-270m.json").exists()
    dialog.close()
    driver.run(asyncio.gather(*tasks))
    driver.run(client.close())
