"""The model manager page against a real service and the loopback Hugging Face hub: pull with live
progress, pause, resume, cancel, finish, delete; import a file; the catalog with fit badges."""

from __future__ import annotations

from PySide6.QtWidgets import QFileDialog

from runtime.server.launcher import free_port
from tests.store.hubfiles import FILE, REPO, publish, tiny_model


def _download(h, ref_part: str):
    rows = [d for d in h.models.downloads.items() if ref_part in (d.get("ref") or d.get("model") or "")]
    return rows[-1] if rows else None


def _row_widget(rowlist, key: str, field: str):
    for w in rowlist.rows:
        obj = getattr(w, field)
        if (obj.get("id") if isinstance(obj, dict) else obj.id) == key:
            return w
    raise AssertionError(f"no row for {key}")


def test_pull_progress_pause_resume_cancel_delete_import(loopback_hub, tmp_path, driver, make_app, monkeypatch):
    data = publish(loopback_hub, tmp_path)
    loopback_hub.hold_after(REPO, FILE, len(data) // 2)
    h = make_app(free_port())  # the service it starts sees the loopback hub's HF_ENDPOINT and HF_HOME
    assert driver.run(h.start(), 240)
    assert h.models.store_available
    page = h.models_page
    h.window.show_page("Models")

    # the catalog, with fit badges, searchable
    driver.until(lambda: h.models.catalog.rowCount() > 2, 60, "the catalog")
    badges = [w.badge.text() for w in page.catalog_list.rows if w.badge.text()]
    assert badges and any("tok/s" in b or "Too big" in b for b in badges)
    page.search.setText("smollm2")
    assert 1 <= h.models.catalog.rowCount() < len(badges) + 5
    assert all("smollm2" in e.id for e in h.models.catalog.items())
    page.search.setText("")

    # pull: live progress stops at the hub's hold, half way
    page.pull_ref.setText(f"{REPO}:Q4_K_M")
    page.pull_button.click()
    driver.until(lambda: (_download(h, REPO) or {}).get("done_bytes", 0) > 0, 60,
                 lambda: f"download progress: {h.models.downloads.items()}")
    d = _download(h, REPO)
    assert page.tabs.currentWidget() is page.downloads
    row = _row_widget(page.downloads, d["id"], "d")
    driver.until(lambda: 0 < row.bar.value() < 1000, 30, "a partial progress bar")
    assert row.pause.isVisible() and row.cancel.isVisible() and not row.resume.isVisible()
    assert "of" in row.state.text()

    row.pause.click()
    driver.until(lambda: _download(h, REPO)["state"] == "paused", 30, "the pause")
    assert row.resume.isVisible()
    loopback_hub.hold_after(REPO, FILE, 1024)  # the resumed GET stalls too, so the cancel meets a live download
    row.resume.click()
    driver.until(lambda: _download(h, REPO)["state"] in ("queued", "downloading", "waiting"), 30, "the resume")
    row.cancel.click()
    driver.until(lambda: _download(h, REPO)["state"] == "cancelled", 30, "the cancel")
    assert not row.pause.isVisible() and not row.cancel.isVisible()
    loopback_hub.release()

    # another model, no hold: it completes and is listed locally (and offered in the chat's picker)
    other = "hearth-test/Other-GGUF"
    data2 = publish(loopback_hub, tmp_path, repo=other, name="Other-Q4_K_M.gguf")
    page.pull_ref.setText(f"{other}:Q4_K_M")
    page.pull_button.click()
    driver.until(lambda: (_download(h, other) or {}).get("state") == "completed", 120,
                 lambda: f"the download to complete: {h.models.downloads.items()}")
    driver.until(lambda: any(m.repo == other for m in h.models.local.items()), 30, "the local list")
    local = next(m for m in h.models.local.items() if m.repo == other)
    assert local.size == len(data2)
    picker = h.chat_page.model_picker
    assert local.id in [picker.itemData(i) for i in range(picker.count())]
    lrow = _row_widget(page.local_list, local.id, "model")
    assert "MB on disk" in lrow.detail.text() and lrow.button.isEnabled()
    lrow.button.click()
    assert "Delete model" in page.confirmation.yes_button.text()  # a downloaded file: asked first
    page.confirmation.yes_button.click()
    driver.until(lambda: all(m.repo != other for m in h.models.local.items()), 30, "the delete")

    # import a .gguf file chosen in the file dialog: the app confirms it with the service's import
    # token, which the service this test started keeps in the session's data directory
    from runtime.config import data_dir

    h.models.data_dir = data_dir()
    mine = tiny_model(tmp_path / "Mine-Q8_0.gguf")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(lambda *a, **k: (str(mine), "")))
    before = {m.id for m in h.models.local.items()}
    page.import_button.click()
    driver.until(lambda: len(h.models.local.items()) == len(before) + 1, 60, "the import")
    imported = next(m for m in h.models.local.items() if m.id not in before)
    assert imported.source == "imported" and imported.path.endswith("Mine-Q8_0.gguf")
    _row_widget(page.local_list, imported.id, "model").button.click()
    page.confirmation.yes_button.click()
    driver.until(lambda: imported.id not in {m.id for m in h.models.local.items()}, 30, "removing the import")

    # a bad reference is explained in the window
    page.pull_ref.setText("nobody/missing-GGUF")
    page.pull_button.click()
    driver.until(lambda: h.window.banner.isVisibleTo(h.window), 30, "the error banner")
    assert "The download could not start." in h.window.banner.label.text()


def test_running_model_memory_and_unload(service, driver, make_app):
    h = make_app(service.port)
    assert driver.run(h.start())
    driver.run(h.models.refresh_running())
    page = h.models_page
    assert page.running_label.text() == "smollm2-135m"
    assert "in memory" in page.memory_label.text()
    page.unload_button.click()
    driver.until(lambda: not h.models.running, 60, "the unload")
    assert page.running_label.text() == "No model loaded"
    assert service.health()["engine"]["state"] == "idle"
