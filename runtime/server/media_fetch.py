"""Images named by a web address (``http(s)://``), fetched only where the service was started
with ``--fetch-media-urls``: the service then makes requests on a client's behalf, so it is off by
default, and even then it fetches from the public internet only.

- When: after the request's model is resolved, and only for a model that reads images (a local
  model without a vision projector is refused without any fetch; a remote model's upstream
  judges what it reads). ``refuse_unless_allowed`` refuses a service without the option
  before any model loads.
- Where: public addresses only. Loopback, private, link-local, shared (CGNAT), multicast,
  unspecified, reserved and documentation addresses are refused, IPv4 and IPv6 alike, and an
  IPv4 address inside an IPv6 one (IPv4-mapped, NAT64, 6to4, Teredo) is judged as that IPv4
  address. A host name is resolved once per connection, every address it resolves to is
  checked, and the connection goes to those checked addresses (no second lookup a DNS rebind
  could answer differently); an address literal is checked as written. Redirects (at most 3)
  are followed here, each one checked the same way.
- What: a 200 answer's whole body, read until its end, at most ``MAX_MEDIA_BYTES``; a larger
  one is refused (the bytes as sent: ``Accept-Encoding: identity``, nothing is inflated here). The fetch has a time limit (10 s in all) and sends no cookies or credentials
  (an address with a user name or password is refused).
- Errors: every failure (refused address, closed or open port, no HTTP, an HTTP error, a
  redirect too many, too large, too slow) answers the client one and the same 400
  (``FETCH_FAILED``): the service cannot be used to map what it reaches (its time to answer
  still differs: a refused address fails at once, a silent public host after the time limit). The reason goes to the
  service's log (``hearth.server``) only.

``HEARTH_TEST_FETCH_LOOPBACK=1`` in the service's environment lets it fetch from loopback
addresses (127.0.0.0/8, ::1) and nothing else; it exists for Hearth's own tests, which serve
pictures on 127.0.0.1, and is not an option for use.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import socket
from typing import Any

import aiohttp
from aiohttp.abc import ResolveResult
from aiohttp.resolver import ThreadedResolver
from yarl import URL

from runtime.media import MAX_MEDIA_BYTES, Media
from runtime.server.errors import ApiError, bad_request

log = logging.getLogger("hearth.server")
FETCH_TIMEOUT_S = 10.0
MAX_REDIRECTS = 3
REDIRECTS = frozenset({301, 302, 303, 307, 308})
#: test-only: loopback addresses may be fetched (Hearth's tests serve their pictures there)
TEST_LOOPBACK_ENV = "HEARTH_TEST_FETCH_LOOPBACK"
#: what the client is told for every failure, whatever it was (the reason is logged)
FETCH_FAILED = (f"an image given by web address could not be fetched: this server fetches images only from public "
                f"http(s) addresses that answer 200 with at most {MAX_MEDIA_BYTES:,} bytes within "
                f"{FETCH_TIMEOUT_S:g} s; send the image inline as a data URL (data:image/png;base64,...)")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SHARED = ipaddress.IPv4Network("100.64.0.0/10")


class FetchRefused(OSError):
    """The address is not one the service fetches from, or the answer is not an image it takes."""


def has_urls(media: list[Media] | None) -> bool:
    return bool(media) and any(m.url for m in media or ())


def refuse_unless_allowed(media: list[Media] | None, allowed: bool) -> None:
    """A 400 for web addresses where the service does not fetch them (before any model loads)."""
    if has_urls(media) and not allowed:
        raise bad_request("this server does not fetch images from the web (start it with --fetch-media-urls to let "
                          "it); send the image inline as a data URL (data:image/png;base64,...)", "image_url")


def refused_address(host: str) -> str | None:
    """Why the service does not connect to the IP address ``host`` (None: it is public)."""
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return "not an IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:  # ::ffff:a.b.c.d is a connection to a.b.c.d
            return refused_address(str(ip.ipv4_mapped))
        inner = [ip.sixtofour, *(ip.teredo or ()), ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF) if ip in _NAT64 else None]
        for v4 in inner:
            if v4 is not None and (why := _refused(v4)) is not None:
                return f"{why} (inside {ip})"
    return _refused(ip)


def _refused(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if ip.is_loopback:
        return None if os.environ.get(TEST_LOOPBACK_ENV) == "1" else "a loopback address"
    for test, why in ((ip.is_unspecified, "the unspecified address"), (ip.is_link_local, "a link-local address"),
                      (ip.is_multicast, "a multicast address"), (ip.is_private, "a private address"),
                      (ip.is_reserved, "a reserved address"),
                      (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local, "a site-local address"),
                      (isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED, "a shared (CGNAT) address"),
                      (not ip.is_global, "not a public address")):
        if test:
            return why
    return None


class PublicResolver(ThreadedResolver):
    """Resolves a host name once and hands the connector only addresses that were checked: every
    address the name resolves to must be public, or the connection is refused."""

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        found = await super().resolve(host, port, family)
        for r in found:
            why = refused_address(r["host"])
            if why is not None:
                raise FetchRefused(f"{host} resolves to {r['host']}, {why}")
        return found


def _check_url(url: URL) -> None:
    """The parts of an address checked before connecting: scheme, no credentials, and a host
    written as an address (which the connector does not resolve) checked here."""
    if url.scheme not in ("http", "https"):
        raise FetchRefused(f"the scheme {url.scheme!r} is not http or https")
    if url.user is not None or url.password is not None:
        raise FetchRefused("the address carries a user name or password")
    host = url.raw_host or ""
    if not host:
        raise FetchRefused("the address has no host")
    bare = host.strip("[]")
    if ":" in bare or bare.replace(".", "").isdigit():  # an address literal: connected to as written
        why = refused_address(bare)
        if why is not None:
            raise FetchRefused(f"{bare} is {why}")


def _shown(url: URL | str) -> str:
    """An address for the log: without its query or credentials, at most 120 characters."""
    try:
        u = URL(str(url))
        text = str(u.with_query(None).with_fragment(None).with_user(None))
    except (ValueError, TypeError):
        text = "(not a valid address)"
    return text if len(text) <= 120 else text[:117] + "..."


async def fetch_media(media: list[Media], allowed: bool, loaded: Any) -> list[Media]:
    """``media`` with every web address replaced by its bytes. Call it once the request's model is
    resolved, with its engine's ``loaded``: a local model's says what it reads (``media``); a
    remote model's (``info["remote"]``) does not: its upstream judges. Raises a 400: the service
    does not fetch, the model reads no images, or ``FETCH_FAILED`` for any failure to fetch."""
    if not has_urls(media):
        return media
    refuse_unless_allowed(media, allowed)
    _refuse_unless_read(loaded)
    urls = [m.url for m in media if m.url]
    timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)
    connector = aiohttp.TCPConnector(resolver=PublicResolver(), use_dns_cache=False)
    # the bytes as sent, never inflated here (a compressed body is counted as it arrives)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector, cookie_jar=aiohttp.DummyCookieJar(),
                                     trust_env=False, auto_decompress=False,
                                     headers={"Accept-Encoding": "identity"}) as s:
        got = await asyncio.gather(*(_fetch_logged(s, u) for u in urls), return_exceptions=True)
    fetched = [g for g in got if isinstance(g, bytes)]
    if len(fetched) != len(got):
        raise bad_request(FETCH_FAILED, "image_url")
    it = iter(fetched)
    return [Media(m.kind, next(it)) if m.url else m for m in media]


def _refuse_unless_read(loaded: Any) -> None:
    """Nothing is fetched for a model not known to read images: a local model without a vision
    projector is told so (as its engine would tell it)."""
    if loaded is not None and (getattr(loaded, "info", None) or {}).get("remote"):
        return  # a remote model: its upstream reads what it reads
    reads = getattr(loaded, "media", None) or {}
    if not reads.get("vision"):
        why = "this model reads no images (its projector is for audio)" if reads else "this model reads text only"
        raise ApiError(400, f"{why}: send the images to a model that has a vision projector, or leave them out",
                       param="image_url", code="media_not_supported")


async def _fetch_logged(session: aiohttp.ClientSession, url: str) -> bytes:
    try:
        return await asyncio.wait_for(_get(session, url), FETCH_TIMEOUT_S)
    except Exception as e:  # every failure: one answer to the client, the reason in the log
        why = f"no answer within {FETCH_TIMEOUT_S:g} s" if isinstance(e, asyncio.TimeoutError) else \
            f"{type(e).__name__}: {e}"
        log.warning("image %s not fetched: %s", _shown(url), why)
        raise


async def _get(session: aiohttp.ClientSession, address: str) -> bytes:
    url = URL(address)
    for _ in range(MAX_REDIRECTS + 1):
        _check_url(url)
        async with session.get(url, allow_redirects=False) as r:
            if r.status in REDIRECTS:
                location = r.headers.get("Location")
                if not location:
                    raise FetchRefused(f"HTTP {r.status} without a Location")
                url = url.join(URL(location))
                continue
            if r.status != 200:
                raise FetchRefused(f"HTTP {r.status}")
            if (r.content_length or 0) > MAX_MEDIA_BYTES:
                raise FetchRefused(f"{r.content_length:,} bytes announced; the limit is {MAX_MEDIA_BYTES:,}")
            data = await read_bounded(r.content, MAX_MEDIA_BYTES)
            if not data:
                raise FetchRefused("an empty body")
            return data
    raise FetchRefused(f"more than {MAX_REDIRECTS} redirects")


async def read_bounded(stream: aiohttp.StreamReader, limit: int) -> bytes:
    """The whole body, read until its end (one read returns only what has arrived), or
    ``FetchRefused`` once it passes ``limit`` bytes."""
    buf = bytearray()
    async for chunk in stream.iter_chunked(1 << 16):
        buf += chunk
        if len(buf) > limit:
            raise FetchRefused(f"more than {limit:,} bytes")
    return bytes(buf)


__all__ = ["FETCH_FAILED", "FETCH_TIMEOUT_S", "fetch_media", "has_urls", "read_bounded",
           "refuse_unless_allowed", "refused_address"]
