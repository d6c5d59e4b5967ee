"""Hearth's desktop app (PySide6): a client of the service's HTTP API; no inference here."""
