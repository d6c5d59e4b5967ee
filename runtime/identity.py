"""Proof that a service holds this computer's API key, without sending the key.

A client that has the stored key (the app, ``hearth run``) sends it only to a service that
answers ``GET /hearth/identity?nonce=N`` with ``HMAC-SHA256(key, "hearth-identity|PORT|N")``:
another program listening on the port cannot compute it, and the port in the message (the
one the connection arrived on) keeps a proof relayed from a real Hearth on another port
from passing. A leaf module: the service, the app and the CLI all use it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

PATH = "/hearth/identity"
NONCE = re.compile(r"[A-Za-z0-9_-]{16,128}")


def new_nonce() -> str:
    return secrets.token_urlsafe(24)


def proof(key: str, port: int, nonce: str) -> str:
    message = f"hearth-identity|{port}|{nonce}".encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def proves(answer: object, key: str, port: int, nonce: str) -> bool:
    """Whether an identity answer (the JSON body) proves the service holds ``key``."""
    given = answer.get("proof") if isinstance(answer, dict) else None
    return isinstance(given, str) and hmac.compare_digest(given, proof(key, port, nonce))
