"""An upstream: another OpenAI-compatible server (vLLM, llama-server, LM Studio, Ollama's
``/v1``, another Hearth) whose models Hearth serves as remote engines, and the list of them
kept in the data directory (``remotes.json``: names, addresses, timeouts, where the key is;
never a key itself).

Prompts sent to an upstream leave this computer, so adding one is explicit and an address is
checked first: plain HTTP is refused outside loopback and private networks unless the user
insists (``allow_insecure``), since anyone on the way could read the prompts and the key.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from runtime.private_files import move_aside, write_private

FILE_NAME = "remotes.json"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
ENV_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


class UpstreamRefused(ValueError):
    """An upstream that cannot be added as given; the message says what to change."""

    def __init__(self, message: str, field: str = "url") -> None:
        super().__init__(message)
        self.field = field


@dataclass(slots=True)
class Timeouts:
    """Seconds: to open the connection, for the first byte of the answer (the upstream's
    prompt processing, and its model load), and between two pieces of a stream."""

    connect: float = 5.0
    first_byte: float = 120.0
    idle: float = 60.0

    @classmethod
    def of(cls, d: dict | None) -> "Timeouts":
        t = cls()
        for k, v in (d or {}).items():
            if k in ("connect", "first_byte", "idle"):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 86400:
                    raise UpstreamRefused(f"'timeouts.{k}' must be a number of seconds above 0", f"timeouts.{k}")
                setattr(t, k, float(v))
        return t


@dataclass(slots=True)
class Upstream:
    name: str
    url: str  #: the API's base, ending in /v1
    #: where the API key is: "keyring" (the OS keyring), "env:VAR" (the service's environment), or None
    key: str | None = None
    allow_insecure: bool = False
    timeouts: Timeouts = field(default_factory=Timeouts)
    #: the user let requests name this upstream's models without ``@NAME`` (a local model of the
    #: same name still wins); off, only ``ID@NAME`` sends a prompt here
    plain_names: bool = False
    #: discovered from its /v1/models: [{"id": ..., "context_length": ...}]
    models: list[dict] = field(default_factory=list)
    refreshed_at: float | None = None

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc

    def endpoint(self, path: str) -> str:
        return self.url + path

    def model_ids(self) -> list[str]:
        return [m["id"] for m in self.models]

    def to_dict(self) -> dict:
        d = asdict(self)
        d["host"] = self.host
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Upstream":
        return cls(d["name"], d["url"], d.get("key"), bool(d.get("allow_insecure")), Timeouts.of(d.get("timeouts")),
                   bool(d.get("plain_names")),
                   [m for m in d.get("models") or [] if isinstance(m, dict) and isinstance(m.get("id"), str)],
                   d.get("refreshed_at"))


def normalise_url(url: str) -> str:
    """``http://host:port``, ``.../v1`` or ``.../v1/`` -> ``http://host:port/v1``."""
    if not isinstance(url, str) or not url.strip():
        raise UpstreamRefused("'url' must be the upstream's address, e.g. http://192.168.1.20:8000")
    url = url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UpstreamRefused(f"'url' must start with http:// or https:// and name a host, got {url!r}")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise UpstreamRefused("'url' must not carry a query, a fragment or credentials (pass a key with "
                              "--key-from-env)")
    return url if url.endswith("/v1") else url + "/v1"


def _private(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%")[0])
    return ip.is_loopback or ip.is_private or ip.is_link_local


def check_transport(url: str, allow_insecure: bool, resolve=socket.getaddrinfo) -> None:
    """Refuse plain HTTP to a host outside loopback and private networks, unless insisted on.
    A name counts as private when every address it resolves to is."""
    parts = urlsplit(url)
    if parts.scheme == "https" or allow_insecure:
        return
    host = parts.hostname or ""
    try:
        private = _private(host)
    except ValueError:  # a name, not an address
        if host == "localhost" or host.endswith(".localhost"):
            return
        try:
            addresses = {a[4][0] for a in resolve(host, None)}
        except (OSError, UnicodeError):
            raise UpstreamRefused(f"cannot resolve {host!r} to check that plain HTTP stays on a private "
                                  "network: use https://, or --allow-insecure-upstream to insist") from None
        private = bool(addresses) and all(_private(a) for a in addresses)
    if not private:
        raise UpstreamRefused(
            f"{host} is outside loopback and private networks and {url} is plain HTTP: prompts and the key "
            "would cross the network unencrypted. Use https://, or add --allow-insecure-upstream "
            "(allow_insecure in the API) to insist")


def make_upstream(name: str, url: str, *, key: str | None = None, allow_insecure: bool = False,
                  timeouts: dict | None = None, plain_names: bool = False) -> Upstream:
    """A checked new upstream (raises ``UpstreamRefused`` naming the field)."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise UpstreamRefused("'name' must be 1 to 64 letters, digits, '.', '_' or '-', starting with a "
                              "letter or digit", "name")
    url = normalise_url(url)
    check_transport(url, allow_insecure)
    if key is not None and key != "keyring" and not (key.startswith("env:") and ENV_VAR.fullmatch(key[4:])):
        raise UpstreamRefused("the key source must be 'keyring' or 'env:VARIABLE'", "key")
    return Upstream(name, url, key, allow_insecure, Timeouts.of(timeouts), plain_names)


class UpstreamStore:
    """``remotes.json`` in the data directory; reloaded when another process (the CLI) changed it."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / FILE_NAME
        self._stamp: tuple[int, int] | None = None

    def changed(self) -> bool:
        return self._file_stamp() != self._stamp

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def load(self) -> list[Upstream]:
        self._stamp = self._file_stamp()
        if self._stamp is None:
            return []
        try:
            raw = json.loads(self.path.read_text("utf-8"))
            return [Upstream.from_dict(d) for d in raw.get("upstreams", [])]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            move_aside(self.path, str(e))
            self._stamp = None
            return []

    def save(self, upstreams: list[Upstream]) -> None:
        body = {"version": 1, "upstreams": [asdict(u) for u in upstreams], "saved_at": time.time()}
        write_private(self.path, json.dumps(body, indent=2) + "\n")
        self._stamp = self._file_stamp()
