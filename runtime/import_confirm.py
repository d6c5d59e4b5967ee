"""The confirmation an import over the API needs: proof that the user chose the file.

Importing makes a file outside the allowed folders usable by every later request, so it is
an explicit user action. The CLI (``hearth import``) and the app may do it; over the API a
request is accepted when the service has an API key (the request carried it: the guard
checked), or when it comes from a loopback address *and* carries the confirmation header
``X-Hearth-Confirm-Import`` with the token stored in the data directory (``import-token``,
owner-only, made at the service's start). The app reads the token and sends the header only
after the user picked the file in its file dialog; a web page cannot read the token, and a
cross-origin page cannot send the header either.
"""

from __future__ import annotations

import hmac
import secrets
from pathlib import Path

from runtime.first_use import sole_writer
from runtime.private_files import narrow, write_private

CONFIRM_HEADER = "X-Hearth-Confirm-Import"
TOKEN_FILE = "import-token"


def token_path(data_dir: Path) -> Path:
    return Path(data_dir) / TOKEN_FILE


def load_token(data_dir: Path) -> str | None:
    try:
        return token_path(data_dir).read_text(encoding="utf-8").strip() or None
    except (FileNotFoundError, UnicodeDecodeError):
        return None


def ensure_token(data_dir: Path) -> str:
    """The stored token, made (owner-only) when missing."""
    token = load_token(data_dir)
    if token is None:
        with sole_writer(token_path(data_dir)):  # a service and the app starting at once: one token
            token = load_token(data_dir)
            if token is None:
                token = secrets.token_urlsafe(32)
                write_private(token_path(data_dir), token + "\n")
    narrow(token_path(data_dir))
    return token


def confirmed(header: str | None, data_dir: Path) -> bool:
    token = load_token(data_dir)
    if not header or not token:
        return False
    return hmac.compare_digest(header.strip().encode(), token.encode())
