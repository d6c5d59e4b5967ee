"""The settings page: values persist, bad values are refused in words, start-at-login is called."""

from __future__ import annotations

from PySide6.QtGui import QPalette

from app.settings import SettingsStore
from runtime.server.launcher import free_port


def test_settings_save_persist_and_start_on_login(driver, make_app, tmp_path):
    calls: list[bool] = []
    h = make_app(free_port(), start_on_login=calls.append, start_on_login_state=lambda: False)
    page = h.settings_page
    assert page.login.isEnabled() and not page.login.isChecked()
    assert page.host.text() == "127.0.0.1"
    page.set_models(["smollm2-135m", "gemma-3-270m"])
    assert page.model.currentText() == "smollm2-135m" and page.model.count() == 2

    page.port.setValue(5123)
    page.model.setCurrentText("gemma-3-270m")
    assert (page.ctx.text(), page.kv_type.currentText()) == ("Automatic", "Automatic")
    page.kv_type.setCurrentText("q8_0")
    page.login.setChecked(True)
    page.tray.setChecked(False)
    page.theme.setCurrentIndex(page.theme.findData("light"))
    page.save_button.click()
    assert calls == [True]
    assert "Restart the server" in page.message.text()
    saved = SettingsStore(tmp_path / "app-settings.json").load()
    assert (saved.port, saved.default_model, saved.kv_type, saved.start_on_login, saved.keep_in_tray) == \
        (5123, "gemma-3-270m", "q8_0", True, False)
    assert h.client.base_url.endswith(":5123")
    from app.ui.style import LIGHT  # chosen: the light theme

    assert h.qapp.palette().color(QPalette.ColorRole.Window).name() == LIGHT.window
    assert h.qapp.palette().color(QPalette.ColorRole.Window).lightness() > 128
    assert "--model gemma-3-270m" in " ".join(h.settings.serve_args())

    page.host.setText(" ")
    page.save_button.click()
    assert "bind address" in page.message.text()
    assert SettingsStore(tmp_path / "app-settings.json").load().host == "127.0.0.1"
    page.revert_button.click()
    assert page.host.text() == "127.0.0.1"
    page.theme.setCurrentIndex(page.theme.findData("system"))
    page.save_button.click()
    assert calls == [True]  # unchanged: not called again


def test_the_theme_choice_is_applied_and_kept(driver, make_app, tmp_path):
    from app.ui.style import DARK, LIGHT

    h = make_app(free_port())
    page = h.settings_page
    assert [page.theme.itemData(i) for i in range(page.theme.count())] == ["system", "light", "dark"]
    window = lambda: h.qapp.palette().color(QPalette.ColorRole.Window).name()  # noqa: E731
    page.theme.setCurrentIndex(page.theme.findData("dark"))
    page.save_button.click()
    assert window() == DARK.window, "Dark chosen, the window is not dark"
    assert SettingsStore(tmp_path / "app-settings.json").load().theme == "dark"
    driver.run(h.shutdown())
    again = make_app(free_port(), data_dir=tmp_path)  # the choice survives a restart
    assert again.settings_page.theme.currentData() == "dark" and window() == DARK.window
    page = again.settings_page
    page.theme.setCurrentIndex(page.theme.findData("light"))
    page.save_button.click()
    assert window() == LIGHT.window


def test_a_settings_file_from_before_the_theme_choice(tmp_path):
    import json

    path = tmp_path / "app-settings.json"
    path.write_text(json.dumps({"theme_follows_os": False, "port": 5000}))
    assert SettingsStore(path).load().theme == "light"
    path.write_text(json.dumps({"theme": "purple"}))
    assert SettingsStore(path).load().theme == "system"


def test_start_on_login_unavailable_is_disabled(make_app):
    h = make_app(free_port())  # no start-at-login switch injected
    assert not h.settings_page.login.isEnabled()
    assert "not available" in h.settings_page.login.toolTip()


def test_ollama_port_checkbox_is_saved_and_reaches_hearth_serve(driver, make_app, tmp_path):
    h = make_app(free_port())
    page = h.settings_page
    assert not page.ollama_port.isChecked() and "--ollama-port" not in h.settings.serve_args()
    assert "11434" in page.ollama_port.text()
    page.ollama_port.setChecked(True)
    page.save_button.click()
    assert "Restart the server" in page.message.text()
    assert SettingsStore(tmp_path / "app-settings.json").load().ollama_port is True
    assert h.settings.serve_args()[-2:] == ["--ollama-port", "11434"]
    from runtime.cli import build_parser

    serve = build_parser().parse_args(["serve", *h.settings.serve_args()])
    assert serve.ollama_port == 11434  # the service accepts what the app sends
    page.ollama_port.setChecked(False)
    page.revert_button.click()
    assert page.ollama_port.isChecked()
