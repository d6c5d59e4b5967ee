"""The app's style sheet: spacing and emphasis only; colours come from the palette, so light and
dark themes both work."""

STYLE = """
#nav { border: none; background: palette(alternate-base); padding-top: 8px; font-size: 13px; }
#nav::item { padding: 10px 14px; border-radius: 6px; margin: 2px 6px; }
#nav::item:selected { background: palette(highlight); color: palette(highlighted-text); }
#sidebar { background: palette(alternate-base); }
#conversationList { border: none; background: transparent; }
#conversationList::item { padding: 7px 8px; border-radius: 6px; }
#conversationList::item:selected { background: palette(highlight); color: palette(highlighted-text); }
#chatHeader { border-bottom: 1px solid palette(mid); }
#chatTitle { font-size: 15px; font-weight: 600; }
#composer { border-top: 1px solid palette(mid); }
#messageInput { border: 1px solid palette(mid); border-radius: 8px; padding: 6px; font-size: 13px; }
#userMessage { background: palette(alternate-base); border-radius: 10px; }
#assistantMessage { background: transparent; border-radius: 10px; }
#roleLabel { font-weight: 600; color: palette(highlight); }
#messageBody { font-size: 13px; }
#statsLabel { color: palette(placeholder-text); font-size: 11px; }
#errorLabel { color: #c62828; }
#smallButton { color: palette(placeholder-text); padding: 2px 6px; font-size: 11px; }
#smallButton:hover { color: palette(highlight); }
#emptyState { color: palette(placeholder-text); font-size: 14px; padding: 60px; }
#primaryButton { background: palette(highlight); color: palette(highlighted-text); border: none;
                 border-radius: 6px; padding: 7px 16px; font-weight: 600; }
#primaryButton:disabled { background: palette(mid); }
#banner { background: #fff4e5; border-bottom: 1px solid #f0b45b; }
#bannerText { color: #5f3b00; }
#fitBadge { border-radius: 9px; padding: 3px 10px; font-size: 11px; font-weight: 600; color: white; }
#settingsMessage { color: palette(placeholder-text); }
#modelRow { border-bottom: 1px solid palette(midlight); }
#modelName { font-weight: 600; font-size: 13px; }
#modelDetail { color: palette(placeholder-text); font-size: 11px; }
"""
