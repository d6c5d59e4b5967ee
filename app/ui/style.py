"""The app's look: two themes (light and dark) of a few colours, one accent, and the style sheet
built from them. The window follows the OS's colour scheme (``theme_for``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Theme:
    name: str
    window: str      # the page background
    nav: str         # the navigation rail and the chat list
    surface: str     # cards, the composer, user bubbles
    raised: str      # hover, code headers, inputs
    border: str
    text: str
    muted: str
    accent: str
    accent_text: str
    accent_soft: str  # selected rows, tool blocks
    code: str
    danger: str
    banner: str
    banner_text: str

    @property
    def dark(self) -> bool:
        return self.name == "dark"


LIGHT = Theme("light", window="#f6f6f8", nav="#ececf1", surface="#ffffff", raised="#f0f0f4", border="#dedfe6",
              text="#1d1e24", muted="#6c6f7d", accent="#5b5bd6", accent_text="#ffffff", accent_soft="#e8e8fb",
              code="#f7f7fa", danger="#c62828", banner="#fff4e5", banner_text="#5f3b00")
DARK = Theme("dark", window="#17181c", nav="#101114", surface="#202228", raised="#2a2c33", border="#31343d",
             text="#e7e8ee", muted="#9699a6", accent="#8b8bf5", accent_text="#0f0f1a", accent_soft="#2b2c4a",
             code="#1b1c21", danger="#ef5350", banner="#3a2a12", banner_text="#ffd9a0")


def _chevron(t: Theme) -> str:
    from app.icons import ICON_DIR

    return (ICON_DIR / f"chevron-{t.name}.svg").as_posix()


def stylesheet(t: Theme) -> str:
    return f"""
QWidget {{ color: {t.text}; }}
QMainWindow, #page, QStackedWidget > QWidget {{ background: {t.window}; }}
QToolTip {{ background: {t.surface}; color: {t.text}; border: 1px solid {t.border}; padding: 4px 6px; }}
#nav {{ border: none; border-radius: 0; background: {t.nav}; padding-top: 14px; font-size: 13px; outline: 0; }}
#nav::item {{ padding: 10px 12px; border-radius: 8px; margin: 2px 10px; color: {t.muted}; }}
#nav::item:hover {{ background: {t.raised}; color: {t.text}; }}
#nav::item:selected {{ background: {t.accent_soft}; color: {t.text}; font-weight: 600; }}
#brand {{ font-size: 16px; font-weight: 700; padding: 16px 20px 4px 20px; background: {t.nav}; }}
#navFooter {{ background: {t.nav}; color: {t.muted}; font-size: 11px; padding: 10px 20px; }}
#sidebar {{ background: {t.nav}; border-right: 1px solid {t.border}; }}
#sidebar QLineEdit {{ background: {t.surface}; }}
#conversationList {{ border: none; background: transparent; outline: 0; font-size: 13px; }}
#conversationList::item {{ padding: 8px 10px; border-radius: 8px; margin: 1px 0; }}
#conversationList::item:hover {{ background: {t.raised}; }}
#conversationList::item:selected {{ background: {t.accent_soft}; color: {t.text}; }}
#chatPane, #messageColumn {{ background: {t.window}; }}
#chatHeader {{ background: {t.window}; border-bottom: 1px solid {t.border}; }}
#chatTitle {{ font-size: 15px; font-weight: 600; }}
#composer {{ background: {t.window}; }}
#composerBox {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 14px; }}
#messageInput {{ border: none; background: transparent; padding: 4px; font-size: 14px; }}
#userMessage {{ background: {t.accent_soft}; border-radius: 14px; }}
#assistantMessage {{ background: transparent; }}
#roleLabel {{ font-weight: 700; color: {t.accent}; font-size: 12px; }}
#messageBody {{ font-size: 14px; }}
#reasoningBody {{ color: {t.muted}; border-left: 3px solid {t.border}; padding-left: 10px; }}
#statsLabel {{ color: {t.muted}; font-size: 11px; }}
#citations {{ color: {t.muted}; font-size: 12px; }}
#errorLabel {{ color: {t.danger}; }}
#smallButton, #blockToggle {{ color: {t.muted}; padding: 3px 8px; font-size: 12px; border: none; background: transparent;
                               text-align: left; border-radius: 6px; }}
#smallButton:hover, #blockToggle:hover {{ color: {t.text}; background: {t.raised}; }}
#toolBlock {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 10px; }}
#toolBlock[status="failed"], #toolBlock[status="timeout"] {{ border-color: {t.danger}; }}
#toolBlock[status="pending"], #toolBlock[status="running"] {{ border-color: {t.accent}; }}
#toolDetails {{ font-size: 12px; }}
#codeBlock {{ background: {t.code}; border: 1px solid {t.border}; border-radius: 10px; }}
#codeHeader {{ background: {t.raised}; border-top-left-radius: 10px; border-top-right-radius: 10px; }}
#codeLanguage {{ color: {t.muted}; font-size: 11px; }}
#codeText {{ font-size: 13px; }}
#emptyState {{ color: {t.muted}; font-size: 14px; padding: 40px; }}
#emptyTitle {{ color: {t.text}; font-size: 22px; font-weight: 700; }}
#toolApproval, #passage {{ background: {t.surface}; border: 1px solid {t.accent}; border-radius: 12px; }}
#dialogHeading {{ font-size: 16px; font-weight: 700; }}
#pageTitle {{ font-size: 20px; font-weight: 700; }}
QPushButton {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 8px; padding: 6px 14px; }}
QPushButton:hover {{ background: {t.raised}; }}
QPushButton:disabled {{ color: {t.muted}; }}
QPushButton:checked {{ background: {t.accent_soft}; border-color: {t.accent}; }}
#primaryButton {{ background: {t.accent}; color: {t.accent_text}; border: none; border-radius: 8px;
                  padding: 7px 16px; font-weight: 600; }}
#primaryButton:hover {{ background: {t.accent}; }}
#primaryButton:disabled {{ background: {t.border}; color: {t.muted}; }}
#iconButton {{ border: none; background: transparent; border-radius: 8px; padding: 6px; }}
#iconButton:hover {{ background: {t.raised}; }}
#chip {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 12px; padding: 3px 10px; font-size: 12px; }}
QLineEdit, QSpinBox, QDoubleSpinBox, QComboBox, QPlainTextEdit {{ background: {t.surface}; border: 1px solid {t.border};
    border-radius: 8px; padding: 5px 8px; selection-background-color: {t.accent}; selection-color: {t.accent_text}; }}
QLineEdit:focus, QSpinBox:focus, QComboBox:focus, QPlainTextEdit:focus {{ border-color: {t.accent}; }}
QComboBox::drop-down {{ border: none; width: 26px; }}
QComboBox::down-arrow {{ image: url({_chevron(t)}); width: 12px; height: 12px; }}
QAbstractSpinBox::up-button, QAbstractSpinBox::down-button {{ width: 0; border: none; }}
QSplitter::handle {{ background: {t.border}; }}
QComboBox QAbstractItemView {{ background: {t.surface}; border: 1px solid {t.border}; selection-background-color: {t.accent_soft};
    selection-color: {t.text}; }}
QGroupBox {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 12px; margin-top: 14px;
             padding: 16px 12px 10px 12px; font-weight: 600; }}
QGroupBox::title {{ subcontrol-origin: margin; left: 14px; top: 0px; padding: 0 4px; color: {t.muted}; }}
QGroupBox QLabel {{ font-weight: normal; }}
QTabWidget::pane {{ border: none; }}
QTabWidget::tab-bar {{ left: 18px; }}
QTabBar {{ qproperty-drawBase: 0; }}
QTabBar::tab {{ background: transparent; padding: 8px 16px; margin-right: 4px; color: {t.muted}; border: none;
                border-bottom: 2px solid transparent; }}
QTabBar::tab:selected {{ color: {t.text}; border-bottom: 2px solid {t.accent}; font-weight: 600; }}
QScrollArea {{ background: transparent; border: none; }}
#counterRows {{ background: {t.surface}; }}
QScrollBar:vertical {{ background: transparent; width: 10px; margin: 2px; }}
QScrollBar::handle:vertical {{ background: {t.border}; border-radius: 4px; min-height: 30px; }}
QScrollBar::add-line, QScrollBar::sub-line {{ height: 0; }}
QListWidget {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 8px; }}
QProgressBar {{ background: {t.raised}; border: none; border-radius: 4px; }}
QProgressBar::chunk {{ background: {t.accent}; border-radius: 4px; }}
QStatusBar {{ background: {t.nav}; color: {t.muted}; border-top: 1px solid {t.border}; }}
QStatusBar QLabel {{ color: {t.muted}; font-size: 11px; padding: 0 8px; }}
#banner {{ background: {t.banner}; border-bottom: 1px solid {t.border}; }}
#bannerText {{ color: {t.banner_text}; }}
#fitBadge {{ border-radius: 9px; padding: 3px 10px; font-size: 11px; font-weight: 600; color: white; }}
#capBadge {{ border-radius: 8px; padding: 2px 8px; font-size: 11px; color: {t.accent}; background: {t.accent_soft}; }}
#pinBadge {{ border-radius: 8px; padding: 2px 8px; font-size: 11px; color: {t.accent_text}; background: {t.accent}; }}
#stateBadge {{ border-radius: 8px; padding: 3px 10px; font-size: 11px; font-weight: 600; background: {t.raised}; }}
#stateBadge[state="running"] {{ background: #2e7d32; color: white; }}
#stateBadge[state="failed"] {{ background: {t.danger}; color: white; }}
#settingsMessage {{ color: {t.muted}; }}
#card, #modelRow {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 10px; }}
#modelName {{ font-weight: 600; font-size: 13px; }}
#modelDetail {{ color: {t.muted}; font-size: 11px; }}
#serverStatus {{ font-size: 15px; font-weight: 600; }}
"""


#: the light style sheet (what the app starts with before it reads the OS's scheme)
STYLE = stylesheet(LIGHT)


def theme_for(dark: bool) -> Theme:
    return DARK if dark else LIGHT


def palette(t: Theme):
    """A QPalette of the theme, for the widgets a style sheet does not reach (menus, dialogs)."""
    from PySide6.QtGui import QColor, QPalette

    p = QPalette()
    roles = {QPalette.ColorRole.Window: t.window, QPalette.ColorRole.WindowText: t.text,
             QPalette.ColorRole.Base: t.surface, QPalette.ColorRole.AlternateBase: t.nav,
             QPalette.ColorRole.Text: t.text, QPalette.ColorRole.Button: t.surface,
             QPalette.ColorRole.ButtonText: t.text, QPalette.ColorRole.Highlight: t.accent,
             QPalette.ColorRole.HighlightedText: t.accent_text, QPalette.ColorRole.ToolTipBase: t.surface,
             QPalette.ColorRole.ToolTipText: t.text, QPalette.ColorRole.PlaceholderText: t.muted,
             QPalette.ColorRole.Mid: t.border, QPalette.ColorRole.Midlight: t.border,
             QPalette.ColorRole.Link: t.accent}
    for role, colour in roles.items():
        p.setColor(role, QColor(colour))
    p.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text, QColor(t.muted))
    p.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText, QColor(t.muted))
    return p
