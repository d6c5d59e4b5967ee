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
    labels = [a.text() for a in row.shrink_menu.actions()]
    assert labels[0].startswith("Q4_K_M") and any(t.startswith("Q8_0") for t in labels)
    row.shrink_menu.actions()[0].trigger()
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
