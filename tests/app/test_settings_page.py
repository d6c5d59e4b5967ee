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
    page.kv_type.setCurrentText("q8_0")
    page.login.setChecked(True)
    page.tray.setChecked(False)
    page.theme.setChecked(False)
    page.save_button.click()
    assert calls == [True]
    assert "Restart the server" in page.message.text()
    saved = SettingsStore(tmp_path / "app-settings.json").load()
    assert (saved.port, saved.default_model, saved.kv_type, saved.start_on_login, saved.keep_in_tray) == \
        (5123, "gemma-3-270m", "q8_0", True, False)
    assert h.client.base_url.endswith(":5123")
    from app.ui.style import LIGHT  # no longer follows the OS: the light theme

    assert h.qapp.palette().color(QPalette.ColorRole.Window).name() == LIGHT.window
    assert h.qapp.palette().color(QPalette.ColorRole.Window).lightness() > 128
    assert "--model gemma-3-270m" in " ".join(h.settings.serve_args())

    page.host.setText(" ")
    page.save_button.click()
    assert "bind address" in page.message.text()
    assert SettingsStore(tmp_path / "app-settings.json").load().host == "127.0.0.1"
    page.revert_button.click()
    assert page.host.text() == "127.0.0.1"
    page.theme.setChecked(True)
    page.save_button.click()
    assert calls == [True]  # unchanged: not called again


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
