"""An upstream's API key: in the OS keyring (``keyring``), or read from the service's
environment (``--key-from-env VAR``). Never in a file: where no keyring backend exists
(``keyring.backends.fail.Keyring``), storing is refused with the way to pass it instead."""

from __future__ import annotations

import os

SERVICE = "hearth-remote"


class KeyringUnavailable(RuntimeError):
    """No OS keyring here: the key is not stored (the message says how to pass it instead)."""


def no_keyring_message(name: str) -> str:
    var = "HEARTH_REMOTE_" + "".join(c if c.isalnum() else "_" for c in name.upper()) + "_KEY"
    return (f"no OS keyring is available here, and Hearth never writes an API key to a file: pass it in "
            f"the service's environment instead, e.g. `export {var}=...`, then `hearth remote add {name} URL "
            f"--key-from-env {var}`, and start `hearth serve` with {var} set")


def keyring_available() -> bool:
    try:
        import keyring
        from keyring.backends import chainer, fail
    except ImportError:
        return False
    backend = keyring.get_keyring()
    if isinstance(backend, fail.Keyring):
        return False
    if isinstance(backend, chainer.ChainerBackend) and not backend.backends:
        return False
    return True


def store_key(name: str, key: str) -> None:
    """Keep ``key`` for upstream ``name`` in the OS keyring; raises ``KeyringUnavailable``."""
    if not keyring_available():
        raise KeyringUnavailable(no_keyring_message(name))
    import keyring
    from keyring.errors import KeyringError

    try:
        keyring.set_password(SERVICE, name, key)
    except KeyringError as e:
        raise KeyringUnavailable(f"the OS keyring refused the key ({e}); {no_keyring_message(name)}") from None


def delete_key(name: str) -> None:
    if not keyring_available():
        return
    import keyring
    from keyring.errors import KeyringError, PasswordDeleteError

    try:
        keyring.delete_password(SERVICE, name)
    except (PasswordDeleteError, KeyringError):
        pass


def load_key(name: str, source: str | None) -> str | None:
    """The key of upstream ``name`` from its source ("keyring" or "env:VAR"); None without one
    (or when the keyring or variable holds none: the upstream then answers 401, which says so)."""
    if not source:
        return None
    if source.startswith("env:"):
        return os.environ.get(source[4:]) or None
    if source == "keyring" and keyring_available():
        import keyring
        from keyring.errors import KeyringError

        try:
            return keyring.get_password(SERVICE, name)
        except KeyringError:
            return None
    return None
