"""Several models in the window: the picker marks the loaded one with its memory and
capabilities, picking another loads it on demand, the Models page shows every resident model
with Pin and Unload, and the chat's context length gets the planner's verdict."""

from __future__ import annotations


def _picker_text(h, mid: str) -> str:
    p = h.chat_page.model_picker
    return next(p.itemText(i) for i in range(p.count()) if p.itemData(i) == mid)


def test_picker_residents_pin_unload_and_fit(service, driver, make_app, gemma_path):
    h = make_app(service.port)
    assert driver.run(h.start())
    from app.models import capability_badges

    rows = {r["id"]: r for r in driver.run(h.models.refresh_available())}
    assert "● loaded" in _picker_text(h, "smollm2-135m") and " MB" in _picker_text(h, "smollm2-135m")
    p = h.chat_page.model_picker
    for mid in filter(None, (p.itemData(i) for i in range(p.count()))):
        assert all(c in _picker_text(h, mid) for c in capability_badges(rows[mid]["capabilities"]))
    assert "● loaded" not in _picker_text(h, "gemma-3-270m")

    h.chat.new_conversation()
    p = h.chat_page.model_picker
    p.setCurrentIndex(p.findData("gemma-3-270m"))
    p.activated.emit(p.currentIndex())  # the user picks it: it loads while they type
    driver.until(lambda: {m["id"] for m in h.models.residents} >= {"smollm2-135m", "gemma-3-270m"}, 120,
                 lambda: f"both models resident: {h.models.residents}")
    driver.until(lambda: "● loaded" in _picker_text(h, "gemma-3-270m"), 60,
                 lambda: f"the picker to mark it loaded: {_picker_text(h, 'gemma-3-270m')!r}")
    cards = {c.model["id"]: c for c in h.models_page.residents.cards}
    assert set(cards) >= {"smollm2-135m", "gemma-3-270m"}
    assert "in memory" in cards["gemma-3-270m"].detail.text()

    cards["gemma-3-270m"].pin_button.click()
    driver.until(lambda: any(m["id"] == "gemma-3-270m" and m.get("pinned") for m in h.models.residents), 30, "the pin")
    card = next(c for c in h.models_page.residents.cards if c.model["id"] == "gemma-3-270m")
    assert card.pin_button.text() == "Unpin"
    card.unload_button.click()
    driver.until(lambda: all(m["id"] != "gemma-3-270m" for m in h.models.residents), 60, "the unload")

    h.chat_page.ctx_spin.setValue(1024)
    h.chat_page.ctx_spin.editingFinished.emit()
    assert h.chat.current.options["ctx"] == 1024
    driver.until(lambda: h.chat_page.fit_label.text() != "", 60, "the fit verdict")
    assert h.chat_page.fit_label.text().split(" ·")[0] in ("Fits on GPU", "Partly on GPU", "Runs on CPU", "Too big")
    assert "color: #" in h.chat_page.fit_label.styleSheet()  # the verdict's colour
