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
#brand[compact="true"] {{ padding: 16px 0 4px 0; }}
#rail {{ background: {t.nav}; }}
#navFooter {{ background: {t.nav}; color: {t.muted}; font-size: 11px; padding: 10px 20px; }}
#sidebar {{ background: {t.nav}; border-right: 1px solid {t.border}; }}
#sidebar QLineEdit {{ background: {t.surface}; }}
#conversationList {{ border: none; background: transparent; outline: 0; font-size: 13px; }}
#conversationList::item {{ padding: 8px 10px; border-radius: 8px; margin: 1px 0; }}
#conversationList::item:hover {{ background: {t.raised}; }}
#conversationList::item:selected {{ background: {t.accent_soft}; color: {t.text}; }}
#messageColumn, #messageView {{ background: {t.window}; border: none; }}
#codeScroll, #codeScroll > QWidget {{ background: transparent; }}
#chatHeader {{ background: {t.window}; border-bottom: 1px solid {t.border}; }}
#chatTitle {{ font-size: 15px; font-weight: 600; }}
#composer {{ background: {t.window}; }}
#composerBox {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 14px; }}
#messageInput {{ border: none; background: transparent; padding: 4px; font-size: 14px; }}
#userMessage {{ background: {t.accent_soft}; border-radius: 14px; }}
#assistantMessage {{ background: transparent; }}
#assistantMessage[finish="interrupted"], #assistantMessage[finish="error"] {{ border-left: 3px solid {t.danger}; }}
#roleLabel {{ font-weight: 700; color: {t.accent}; font-size: 12px; }}
#messageBody {{ font-size: 14px; }}
#reasoningBody {{ color: {t.muted}; border-left: 3px solid {t.border}; padding-left: 10px; }}
#statsLabel {{ color: {t.muted}; font-size: 11px; }}
#variantLabel {{ color: {t.muted}; font-size: 12px; padding: 0 2px; }}
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
#dangerButton {{ color: {t.danger}; border-color: {t.danger}; }}
#dangerButton:hover {{ background: {t.danger}; color: white; }}
#primaryButton:disabled {{ background: {t.border}; color: {t.muted}; }}
#iconButton {{ border: none; background: transparent; border-radius: 8px; padding: 6px; }}
#iconButton:hover {{ background: {t.raised}; }}
QPushButton:focus {{ border: 2px solid {t.accent}; padding: 5px 13px; }}
#primaryButton:focus {{ border: 2px solid {t.text}; padding: 5px 14px; }}
#smallButton:focus, #blockToggle:focus {{ border: 2px solid {t.accent}; padding: 1px 6px; }}
#iconButton:focus {{ border: 2px solid {t.accent}; padding: 4px; }}
#chip:focus {{ border: 2px solid {t.accent}; padding: 2px 9px; }}
QCheckBox:focus, QRadioButton:focus {{ background: {t.accent_soft}; border-radius: 4px; }}
#nav::item:focus, #conversationList::item:focus {{ border: 2px solid {t.accent}; }}
QTabBar::tab:focus {{ color: {t.accent}; }}
#messageView:focus {{ border-left: 2px solid {t.accent}; }}
#chip {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 12px; padding: 3px 10px; font-size: 12px; }}
QLineEdit, QSpinBox, QDoubleSpinBox, QComboBox, QPlainTextEdit {{ background: {t.surface}; border: 1px solid {t.border};
    border-radius: 8px; padding: 5px 8px; selection-background-color: {t.accent}; selection-color: {t.accent_text}; }}
QLineEdit:focus, QSpinBox:focus, QDoubleSpinBox:focus, QComboBox:focus, QPlainTextEdit:focus {{
    border: 2px solid {t.accent}; padding: 4px 7px; }}
#messageInput:focus {{ border: none; padding: 4px; }}
#composerBox[focused="true"] {{ border-color: {t.accent}; }}
QComboBox {{ combobox-popup: 0; }}
QComboBox::drop-down {{ border: none; width: 26px; }}
QComboBox::down-arrow {{ image: url({_chevron(t)}); width: 12px; height: 12px; }}
QAbstractSpinBox::up-button, QAbstractSpinBox::down-button {{ width: 0; border: none; }}
#ctxSpin {{ padding-right: 20px; }}
#ctxSpin:focus {{ padding-right: 19px; }}
#ctxSpin::up-button {{ subcontrol-origin: border; subcontrol-position: top right; width: 18px; border: none; }}
#ctxSpin::down-button {{ subcontrol-origin: border; subcontrol-position: bottom right; width: 18px; border: none; }}
#ctxSpin::up-arrow, #ctxSpin::down-arrow {{ image: none; width: 0; height: 0; }}
QSplitter::handle {{ background: {t.border}; }}
QComboBox QAbstractItemView {{ background: {t.surface}; border: 1px solid {t.border}; selection-background-color: {t.accent_soft};
    selection-color: {t.text}; outline: 0; padding: 4px; }}
QComboBox QAbstractItemView::item {{ min-height: 26px; padding: 0 8px; border-radius: 6px; }}
QComboBox QAbstractItemView::item:selected {{ background: {t.accent_soft}; color: {t.text}; }}
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
QScrollBar:horizontal {{ background: transparent; height: 10px; margin: 2px; }}
QScrollBar::handle:horizontal {{ background: {t.border}; border-radius: 4px; min-width: 30px; }}
QScrollBar::handle:hover {{ background: {t.muted}; }}
QScrollBar::add-line, QScrollBar::sub-line {{ height: 0; width: 0; }}
QScrollBar::add-page, QScrollBar::sub-page {{ background: transparent; }}
QListWidget {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 8px; }}
#hubResults {{ padding: 4px; }}
#hubResults::item {{ padding: 6px 8px; border-radius: 6px; margin: 1px 0; color: {t.text}; }}
#hubResults::item:hover {{ background: {t.raised}; }}
#hubResults::item:selected {{ background: {t.accent_soft}; color: {t.text}; }}
#hubCardText {{ background: transparent; border: none; border-top: 1px solid {t.border}; padding-top: 6px; }}
#hubSplit::handle {{ background: transparent; }}
#hubSplit::handle:hover {{ background: {t.accent_soft}; }}
QProgressBar {{ background: {t.raised}; border: none; border-radius: 4px; }}
QProgressBar::chunk {{ background: {t.accent}; border-radius: 4px; }}
#contextBar {{ border-radius: 3px; }}
#contextBar::chunk {{ border-radius: 3px; }}
#contextBar[warn="true"]::chunk {{ background: {t.danger}; }}
#contextMeter QLabel[warn="true"] {{ color: {t.danger}; }}
QStatusBar {{ background: {t.nav}; color: {t.muted}; border-top: 1px solid {t.border}; }}
QStatusBar QLabel {{ color: {t.muted}; font-size: 11px; padding: 0 8px; }}
#banner {{ background: {t.banner}; border-bottom: 1px solid {t.border}; }}
#bannerText {{ color: {t.banner_text}; }}
#fitBadge {{ border-radius: 9px; padding: 2px 9px; font-size: 11px; font-weight: 600; border: none; }}
#capBadge {{ border-radius: 8px; padding: 2px 8px; font-size: 11px; color: {t.accent}; background: {t.accent_soft}; }}
#pinBadge {{ border-radius: 8px; padding: 2px 8px; font-size: 11px; font-weight: 600; color: {t.accent};
             background: {t.accent_soft}; }}
#stateBadge {{ border-radius: 8px; padding: 3px 10px; font-size: 11px; font-weight: 600; background: {t.raised}; }}
#stateBadge[state="running"] {{ background: rgba(46, 125, 50, 36); color: {"#81c784" if t.dark else "#2e7d32"}; }}
#stateBadge[state="failed"] {{ background: rgba(198, 40, 40, 36); color: {t.danger}; }}
#settingsMessage {{ color: {t.muted}; }}
#card, #modelRow {{ background: {t.surface}; border: 1px solid {t.border}; border-radius: 10px; }}
#suggestionCard {{ background: {t.surface}; border: 1px solid {t.accent}; border-radius: 12px; }}
#suggestionHeading {{ color: {t.accent}; font-weight: 700; font-size: 12px; }}
#modelName {{ font-weight: 600; font-size: 13px; }}
#modelDetail {{ color: {t.muted}; font-size: 11px; }}
#menuNote {{ color: {t.muted}; font-size: 12px; }}
#serverStatus {{ font-size: 15px; font-weight: 600; }}
"""


#: the light style sheet (what the app starts with before it reads the OS's scheme)
STYLE = stylesheet(LIGHT)


def badge_style(colour: str) -> str:
    """A verdict badge's own colour: coloured text on a faint tint of it (a solid or outlined
    badge looks like a button), lightened on the dark theme so it stays readable."""
    from PySide6.QtGui import QColor, QGuiApplication, QPalette

    if not colour:
        return ""
    c = QColor(colour)
    if QGuiApplication.palette().color(QPalette.ColorRole.Window).lightness() < 128:
        c = c.lighter(170)
    return f"color: {c.name()}; background: rgba({c.red()}, {c.green()}, {c.blue()}, 36);"


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
