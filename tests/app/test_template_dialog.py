"""A model's chat template on the Models page, against a real service: the row's Template button
shows it read-only, a chosen file replaces it (or the service's reason shows when it cannot), and
the model's own comes back."""

from __future__ import annotations

import asyncio

from PySide6.QtWidgets import QFileDialog

from app.ui.template_dialog import NO_TEMPLATE, ORIGINS

CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_show_replace_and_reset_a_template(service, driver, data_dir, gemma_path, tmp_path, monkeypatch):
    from app.api_client import ApiClient
    from app.model_templates import ModelTemplates
    from app.models import ModelStoreService
    from app.ui.models_page import ModelsPage

    client = ApiClient(service.url)
    tasks: list[asyncio.Future] = []
    run = lambda coro: tasks.append(asyncio.ensure_future(coro))  # noqa: E731 - the app's spawn, in small
    models = ModelStoreService(client, data_dir)
    page = ModelsPage(models, run, None, ModelTemplates(client, data_dir))
    driver.run(models.refresh_local())
    rows = {w.model.id: w for w in page.local_list.rows}
    assert rows["smollm2-135m"].template_button.isEnabled()

    rows["smollm2-135m"].template_button.click()  # the model's own, read-only
    dialog = page.template_dialog
    assert dialog is not None and dialog.isVisible()
    driver.until(lambda: dialog.text.toPlainText() != "", 30, "the template")
    assert "<|im_start|>" in dialog.text.toPlainText() and dialog.text.isReadOnly()
    assert dialog.origin.text() == ORIGINS["model"] and not dialog.reset_button.isEnabled()

    rows["gemma-3-270m"].template_button.click()  # a model without one: the plain fallback is said
    dialog = page.template_dialog
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
    dialog.close()
    driver.run(asyncio.gather(*tasks))
    driver.run(client.close())
