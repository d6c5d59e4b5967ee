"""The Models page in a small window (real widgets offscreen): the loaded models' cards fold away
below a height and come back with their button; an installed model's row keeps its badge at its
own height, and its path (in the tooltip) never pushes the list sideways."""

from __future__ import annotations

from app.api_types import LocalModel
from runtime.server.launcher import free_port

LONG_PATH = "/home/someone/.cache/huggingface/hub/models--someone--a-model-GGUF/snapshots/" + "0" * 40 + "/a-model.gguf"


def _app(make_app, driver, size):
    h = make_app(free_port())
    h.models.local.reset([LocalModel("a-model", "A Model With A Longer Name", "hub", LONG_PATH, 4 * 10**9, "Q4_K_M",
                                     fit={"verdict": "cpu", "predicted_tokens_per_s": 38.0},
                                     capabilities=["chat", "tools"])])
    h.window.resize(*size)
    h.window.show()
    h.window.show_page("Models")
    driver.pump(0.3)
    return h


def test_an_installed_row_fits_an_800x600_window(make_app, driver):
    h = _app(make_app, driver, (800, 600))
    page = h.models_page
    row = page.local_list.rows[0]
    assert not page.local_list.horizontalScrollBar().isVisible()
    assert row.badge.isVisible() and row.badge.height() < row.height() - 12  # not stretched to the row
    assert LONG_PATH not in row.detail.text() and row.detail.toolTip() == LONG_PATH
    assert row.settings_button.isVisible() and row.button.isVisible()
    assert row.button.geometry().right() <= page.local_list.viewport().width()


def test_the_loaded_models_fold_away_in_a_short_window(make_app, driver):
    h = _app(make_app, driver, (800, 600))
    page = h.models_page
    assert not page.residents.isVisibleTo(page) and not page.residents_button.isChecked()
    h.window.resize(1280, 900)
    driver.pump(0.3)
    assert page.residents.isVisibleTo(page) and page.residents_button.isChecked()
    page.residents_button.click()  # the user's choice outlives resizes
    driver.pump(0.1)
    assert not page.residents.isVisibleTo(page) and page.residents_button.text() == "Show each"
    h.window.resize(1300, 950)
    driver.pump(0.3)
    assert not page.residents.isVisibleTo(page)
