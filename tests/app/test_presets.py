"""System-prompt presets in the chat's settings: picking one fills the prompt (and its
temperature), a prompt is kept as the user's own preset across a restart, built-in ones cannot
be overwritten or deleted, and a damaged presets file never stops the dialog (real dialog
offscreen, real files)."""

from __future__ import annotations

from app.conversations import ConversationStore
from app.presets import BUILTIN, PresetStore
from app.ui.chat_settings import CHOOSE, ConversationSettingsDialog


def _dialog(tmp_path, prompt: str = ""):
    store = ConversationStore(tmp_path / "c.sqlite3")
    c = store.create(system_prompt=prompt)
    return ConversationSettingsDialog(c, None, PresetStore(tmp_path / "prompt-presets.json")), store


def test_picking_a_preset_fills_the_prompt_and_its_temperature(qapp, tmp_path):
    d, store = _dialog(tmp_path)
    p = d.preset_picker
    assert p.currentText() == CHOOSE and p.count() == 1 + len(BUILTIN)
    coding = next(x for x in BUILTIN if x.name == "Coding helper")
    p.setCurrentIndex(p.findData(coding.name))
    p.activated.emit(p.currentIndex())
    assert d.system.toPlainText() == coding.prompt and d.temperature.value() == coding.temperature
    assert not d.delete_preset_button.isEnabled()  # built in
    d.system.setPlainText(coding.prompt + " Prefer Python.")  # edited: no longer that preset
    assert p.currentText() == CHOOSE
    store.close()


def test_a_prompt_saved_as_a_preset_comes_back_and_can_be_deleted(qapp, tmp_path):
    d, store = _dialog(tmp_path, "Answer as a pirate.")
    d.temperature.setValue(1.1)
    d.preset_name.setText("  Pirate ")
    d.save_preset_button.click()
    assert "Saved" in d.preset_note.text() and d.preset_picker.currentData() == "Pirate"
    assert d.delete_preset_button.isEnabled()
    d.preset_name.setText("Translator")  # a built-in name is refused, in words
    d.save_preset_button.click()
    assert "built-in" in d.preset_note.text()

    again, _ = _dialog(tmp_path, "Answer as a pirate.")  # a new dialog, a new store: from the file
    assert again.preset_picker.currentData() == "Pirate" and "(yours)" in again.preset_picker.currentText()
    other, _ = _dialog(tmp_path)
    other.preset_picker.setCurrentIndex(other.preset_picker.findData("Pirate"))
    other.preset_picker.activated.emit(other.preset_picker.currentIndex())
    assert other.system.toPlainText() == "Answer as a pirate." and abs(other.temperature.value() - 1.1) < 1e-9
    other.delete_preset_button.click()
    assert other.preset_picker.findData("Pirate") == -1
    assert PresetStore(tmp_path / "prompt-presets.json").get("Pirate") is None
    store.close()


def test_a_damaged_presets_file_leaves_the_built_in_ones(qapp, tmp_path):
    (tmp_path / "prompt-presets.json").write_text("{not json")
    d, store = _dialog(tmp_path)
    assert d.preset_picker.count() == 1 + len(BUILTIN)
    assert PresetStore(tmp_path / "prompt-presets.json").save("", "x") == "Give the preset a name."
    store.close()


def test_a_preset_keeps_every_chat_setting_and_the_api_takes_them(qapp, tmp_path):
    """Top-p, top-k, min-p, repeat penalty, answer length and stop strings go into a saved
    preset and come back from it in another chat; the request the chat then sends carries them
    under the names the service reads."""
    from runtime.server.wire.openai.schemas import parse_chat

    d, store = _dialog(tmp_path, "Answer in haiku.")
    d.temperature.setValue(0.3)
    d.top_p.setValue(0.8)
    d.top_k.setValue(12)
    d.min_p.setValue(0.07)
    d.repeat_penalty.setValue(1.15)
    d.max_tokens.setValue(333)
    d.stop.setPlainText("###\nUser:\\n")
    d.preset_name.setText("Haiku")
    d.save_preset_button.click()
    assert "Saved" in d.preset_note.text()
    store.close()

    other, store = _dialog(tmp_path)  # another chat, a new store read from the file
    p = other.preset_picker
    p.setCurrentIndex(p.findData("Haiku"))
    p.activated.emit(p.currentIndex())
    s = other.sampling()
    assert other.system.toPlainText() == "Answer in haiku."
    assert (s.temperature, s.top_p, s.top_k, s.min_p, s.repeat_penalty, s.max_tokens) == (0.3, 0.8, 12, 0.07, 1.15, 333)
    assert s.stop == ("###", "User:\n")
    body = {"messages": [{"role": "user", "content": "Hi"}], **s.to_request()}
    params = parse_chat(body).params
    assert (params.top_k, params.min_p, params.repeat_penalty, params.top_p, params.max_tokens) == \
        (12, 0.07, 1.15, 0.8, 333)
    assert params.stop == ["###", "User:\n"]
    # a built-in preset sets its temperature and leaves the rest as the chat has it
    p.setCurrentIndex(p.findData("Coding helper"))
    p.activated.emit(p.currentIndex())
    assert other.sampling().top_k == 12 and other.temperature.value() == 0.2
    store.close()


def test_a_chat_keeps_its_settings_across_a_restart(tmp_path):
    from app.conversations import Sampling

    store = ConversationStore(tmp_path / "c.sqlite3")
    s = Sampling(0.4, 0.9, 200, 5, top_k=20, min_p=0.05, repeat_penalty=1.1, stop=("END",))
    c = store.create(sampling=s)
    store.close()
    again = ConversationStore(tmp_path / "c.sqlite3")
    assert again.get(c.id).sampling == s
    again.close()
