"""The Models page's "Make smaller": a local model's menu starts the service's quantize job, the
page shows its step and progress, and Stop ends it."""

from __future__ import annotations


def test_make_smaller_starts_shows_progress_and_stops(service, driver, make_app):
    from runtime.config import data_dir

    h = make_app(service.port)
    assert driver.run(h.start())
    h.quantize.data_dir = data_dir()  # the service's confirmation token lives there
    page = h.models_page
    row = next(r for r in page.local_list.rows if r.model.id == "smollm2-135m")
    assert row.shrink_button.isVisible() or not page.isVisible()
    assert row.shrink_button.isEnabled()
    targets = [a for a in row.shrink_menu.actions() if a.text()]
    assert targets[0].text().startswith("Q4_K_M")  # smaller than its Q4_1, nothing larger
    targets[0].trigger()
    driver.until(lambda: h.quantize.job is not None, 30, "the job to start")
    assert h.quantize.job["state"] == "running" and h.quantize.job["model"] == "smollm2-135m"
    assert "Making a Q4_K_M version of smollm2-135m" in page.job_label.text()
    assert not page.job_stop.isHidden()
    driver.until(lambda: (h.quantize.job or {}).get("total"), 300, "the quantizer's progress")
    assert "/" in page.job_label.text()  # its step and how far it is
    page.job_stop.click()
    driver.until(lambda: h.quantize.job["state"] == "stopped", 30, "the stop")
    assert page.job_label.text().endswith("stopped") and page.job_stop.isHidden()



def test_job_lines_say_what_is_made_and_how_far():
    from app.quantize_jobs import describe

    job = {"model": "m", "to": "Q4_K_M", "state": "running", "step": "importance", "done": 3, "total": 8}
    assert describe(job) == "Making a Q4_K_M version of m: importance 3/8…"
    assert describe({**job, "state": "done", "result": {"size": 98_000_000}}).endswith("done (98 MB)")
    assert describe({**job, "state": "failed", "error": "disk full"}).endswith("failed: disk full")


def _offered(quant: str | None, driver) -> tuple[list[str], str, object]:
    """The mixes a Models row offers for a file of ``quant``, the note above them, the button."""
    from PySide6.QtWidgets import QLabel, QWidgetAction

    from app.api_types import LocalModel
    from app.ui.models_page import LocalRow

    row = LocalRow(LocalModel("m", "M", "imported", "/m.gguf", 10**9, quant, capabilities=["chat"]),
                   delete=lambda _: None, shrink=lambda *_: None)
    row.show()
    driver.pump(0.05)
    actions = row.shrink_menu.actions()
    notes = [a.defaultWidget().text() for a in actions if isinstance(a, QWidgetAction)
             and isinstance(a.defaultWidget(), QLabel)]
    mixes = [a.text().split(" · ")[0] for a in actions if a.text()]
    row.close()
    return mixes, " ".join(notes), row.shrink_button


def test_make_smaller_offers_only_smaller_files_and_says_what_requantizing_costs(driver):
    mixes, note, button = _offered("Q4_1", driver)  # about 5.0 bits a weight
    assert mixes == ["Q4_K_M", "Q3_K_M"] and button.isEnabled()
    assert "already quantized (Q4_1)" in note and "loses more quality" in note and "original weights" in note
    assert "original weights" in button.toolTip()
    mixes, note, _ = _offered("Q8_0", driver)
    assert mixes == ["Q4_K_M", "Q5_K_M", "Q6_K", "Q3_K_M"] and "Q8_0" not in mixes and note
    mixes, note, _ = _offered("F16", driver)  # the original weights: every mix, nothing lost twice
    assert mixes == ["Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "Q3_K_M"] and not note
    mixes, note, _ = _offered("UD-Q4_K_XL", driver)  # outside llama.cpp's table: its digit and a half
    assert mixes == ["Q3_K_M"]
    mixes, note, button = _offered("Q2_K", driver)  # nothing is smaller
    assert mixes == [] and not button.isEnabled() and "already as small" in button.toolTip()
    mixes, note, _ = _offered(None, driver)  # unknown: all, with a word on the risk
    assert len(mixes) == 5 and "cannot tell" in note
