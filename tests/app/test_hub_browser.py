"""Browsing Hugging Face from the Models page, against a real service and the loopback hub:
search, a model's card (numbers and tags the hub gives), its quantizations by size, and the
download of the one picked; a search with no match says so."""

from __future__ import annotations

from PySide6.QtCore import QUrl

from runtime.server.launcher import free_port
from tests.store.hubfiles import tiny_model


def test_search_card_quantization_and_download(loopback_hub, tmp_path, driver, make_app):
    data = tiny_model(tmp_path / "src.gguf").read_bytes()
    repo = "hearth-test/Tiny-Chat-GGUF"
    loopback_hub.add_repo(repo, {"Tiny-Chat-Q4_K_M.gguf": data, "Tiny-Chat-Q8_0.gguf": data + b"\0" * 4096,
                                 "README.md": b"---\nlicense: apache-2.0\n---\n# Tiny chat\n\nA *small* model; "
                                               b"see [the paper](https://example.org/paper).\n"},
                          tags=["gguf", "en", "fr", "license:apache-2.0", "base_model:org/Tiny", "text-generation"],
                          downloads=12_500)
    loopback_hub.add_repo("someone/Other-GGUF", {"Other-Q4_0.gguf": data}, downloads=10)
    h = make_app(free_port())  # the service it starts sees the loopback hub's HF_ENDPOINT
    assert driver.run(h.start(), 240)
    page = h.models_page
    h.window.show_page("Models")
    page.tabs.setCurrentWidget(page.hub)
    hub = page.hub

    hub.query.setText("tiny")
    hub.search_button.click()
    driver.until(lambda: hub.results.count() > 0, 60, lambda: f"search results; status {hub.status.text()!r}")
    repos = [hub.results.item(i).data(0x0100) for i in range(hub.results.count())]
    assert repos == [repo] and "12.5k downloads" in hub.results.item(0).text()

    hub.results.setCurrentRow(0)
    assert hub.title.text() == repo
    facts = hub.facts.text()
    assert "apache-2.0" in facts and "org/Tiny" in facts and "en, fr" in facts and "12.5k" in facts
    driver.until(lambda: hub.quant.count() == 2, 60, lambda: f"the files; note {hub.files_note.text()!r}")
    # the card's own text, as Markdown, without its front matter; its link shown, not followed
    driver.until(lambda: "Tiny chat" in hub.card_text.toPlainText(), 60,
                 lambda: f"the card text: {hub.card_text.toPlainText()!r}")
    shown = hub.card_text.toPlainText()
    assert "license:" not in shown and "---" not in shown and "*small*" not in shown and "small model" in shown
    assert 'href="https://example.org/paper"' in hub.card_text.toHtml()
    assert not hub.card_text.openLinks() and not hub.card_text.openExternalLinks()
    hub.card_text.anchorClicked.emit(QUrl("https://example.org/paper"))
    assert "Tiny chat" in hub.card_text.toPlainText()  # a click on the link leaves the card where it is
    assert hub.quant.itemData(0) == "Q4_K_M" and "MB" in hub.quant.itemText(0)  # the balanced one first
    hub.quant.setCurrentIndex(1)
    assert hub.quant.currentData() == "Q8_0"
    hub.download_button.click()
    driver.until(lambda: any(d.get("state") == "completed" and repo in (d.get("ref") or "")
                             for d in h.models.downloads.items()), 120,
                 lambda: f"the download: {h.models.downloads.items()}")
    driver.until(lambda: any(m.repo == repo and m.quant == "Q8_0" for m in h.models.local.items()), 30,
                 "the model among the installed ones")

    hub.query.setText("other")
    hub.search_button.click()
    driver.until(lambda: hub.results.count() == 1 and "Other" in hub.results.item(0).text(), 60, "the other model")
    hub.results.setCurrentRow(0)
    driver.until(lambda: "no model card" in hub.card_text.toPlainText(), 60,
                 lambda: f"the missing card: {hub.card_text.toPlainText()!r}")
    assert "could not" not in h.window.banner.label.text()  # a repository without a card is no error

    hub.query.setText("zebra-nothing")
    hub.search_button.click()
    driver.until(lambda: "No GGUF model" in hub.status.text(), 60, "the empty search")
    assert hub.results.count() == 0 and "zebra-nothing" in hub.status.text()


def test_a_gptq_repository_is_offered_converted_and_becomes_a_local_model(loopback_hub, tmp_path, driver, make_app):
    from tests.quantize.test_hf_import import _checkpoint

    _checkpoint(tmp_path / "ckpt", "gptq", packed=True)
    repo = "hearth-test/Tiny-Chat-GPTQ"
    loopback_hub.add_repo(repo, {p.name: p.read_bytes() for p in (tmp_path / "ckpt").iterdir()})
    h = make_app(free_port())
    assert driver.run(h.start(), 240)
    page = h.models_page
    h.window.show_page("Models")
    page.tabs.setCurrentWidget(page.hub)
    hub = page.hub
    hub.repo = repo  # as a search hit picked: its files listed by the service
    hub.repo_selected.emit(repo)
    driver.until(lambda: hub.quant.count() == 1, 60, lambda: f"the checkpoint row; note {hub.files_note.text()!r}")
    assert "GPTQ checkpoint (converted to GGUF)" in hub.quant.itemText(0) and "KB" in hub.quant.itemText(0)
    assert "converts it to a GGUF" in hub.files_note.text() and hub.download_button.isEnabled()
    hub.download_button.click()
    driver.until(lambda: any(m.id.startswith("Tiny-Chat-GPTQ") for m in h.models.local.items()), 120,
                 lambda: f"the converted model among the installed ones: {h.models.downloads.items()}")
    done = next(d for d in h.models.downloads.items() if d.get("repo") == repo)
    assert done["state"] == "completed" and done["convert"] == "gptq" and done["path"].endswith("Tiny-Chat-GPTQ.gguf")
