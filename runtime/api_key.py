"""The service's API key: made on request, kept in the data directory readable by its owner only.

A service bound to loopback needs no key; binding any other address is refused without one.
Once a key exists (``hearth key`` or ``hearth serve --api-key generate``), every request but
``/health`` must carry it as ``Authorization: Bearer <key>``.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
from pathlib import Path

from runtime.first_use import sole_writer, temporary_beside
from runtime.private_files import private_dir

KEY_FILE = "api_key"
ENV_VAR = "HEARTH_API_KEY"
MIN_LENGTH = 16


class KeyRequired(ValueError):
    """A non-loopback bind without a key."""


def key_path(data_dir: Path) -> Path:
    return Path(data_dir) / KEY_FILE


def load_key(data_dir: Path) -> str | None:
    try:
        key = key_path(data_dir).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return key or None


def create_key(data_dir: Path, rotate: bool = False) -> str:
    """The stored key, made (or replaced, with ``rotate``) with owner-only permissions. Two
    callers at once (threads or processes) both get the one key that ends up stored."""
    if not rotate and (existing := load_key(data_dir)):
        return existing
    path = key_path(data_dir)
    private_dir(path.parent)
    with sole_writer(path):
        if not rotate and (existing := load_key(data_dir)):  # made while this caller waited
            return existing
        key = "hearth-" + secrets.token_urlsafe(32)
        tmp = temporary_beside(path)  # owner-only from the start (mkstemp)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC)
            try:
                os.fchmod(fd, 0o600)  # the umask cannot widen it
                os.write(fd, (key + "\n").encode())
            finally:
                os.close(fd)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return key


def remove_key(data_dir: Path) -> bool:
    try:
        key_path(data_dir).unlink()
        return True
    except FileNotFoundError:
        return False


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def key_matches(header: str | None, key: str) -> bool:
    """``Authorization: Bearer <key>``, compared in constant time."""
    if not header:
        return False
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), key.encode())


def request_key_matches(authorization: str | None, x_api_key: str | None, key: str) -> bool:
    """The key as ``Authorization: Bearer <key>`` or as ``x-api-key: <key>`` (Anthropic's clients
    send the latter), either compared in constant time."""
    if key_matches(authorization, key):
        return True
    if not x_api_key:
        return False
    return hmac.compare_digest(x_api_key.strip().encode(), key.encode())


def serve_key(option: str | None, host: str, data_dir: Path) -> tuple[str | None, str | None]:
    """The key ``hearth serve`` uses, and a line to print about it.

    ``option``: ``--api-key`` (``generate``, or the key itself); else ``$HEARTH_API_KEY``,
    else the stored key. Raises ``KeyRequired`` for a non-loopback ``host`` without one.
    """
    key, note = None, None
    if option == "generate":
        existed = load_key(data_dir) is not None
        key = create_key(data_dir)
        note = (f"API key ({'stored' if existed else 'new, stored'} in {key_path(data_dir)}): {key}\n"
                f"  Clients send it as: Authorization: Bearer {key}")
    elif option:
        key = option
    elif os.environ.get(ENV_VAR):
        key = os.environ[ENV_VAR]
    elif (stored := load_key(data_dir)) is not None:
        key = stored
        note = f"API key required (stored in {key_path(data_dir)}; `hearth key` prints it)"
    if key is not None and len(key) < MIN_LENGTH:
        raise KeyRequired(f"the API key must be at least {MIN_LENGTH} characters; `--api-key generate` makes one")
    if key is None and not is_loopback(host):
        raise KeyRequired(
            f"binding {host} makes the API reachable from other machines, so it needs an API key.\n"
            f"  Run `hearth serve --host {host} --api-key generate` to create one (kept in {key_path(data_dir)},\n"
            f"  readable by you only, and printed), or set {ENV_VAR}. Bind 127.0.0.1 to stay local without a key.")
    return key, note
