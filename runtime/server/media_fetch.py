"""Images named by a web address (``http(s)://``), fetched only where the service was started
with ``--fetch-media-urls``: the service then makes requests on a client's behalf, so it is off by
default. A fetch has a time limit (10 s in all), follows at most 3 redirects, sends no cookies
or credentials, and stops reading at the medium's size limit."""

from __future__ import annotations

import asyncio

import aiohttp

from runtime.media import MAX_MEDIA_BYTES, Media
from runtime.server.errors import bad_request

FETCH_TIMEOUT_S = 10.0


async def fetch_media(media: list[Media], allowed: bool) -> list[Media]:
    """``media`` with every web address replaced by its bytes; a 400 that says why when it cannot be."""
    urls = [m.url for m in media if m.url]
    if not urls:
        return media
    if not allowed:
        raise bad_request("this server does not fetch images from the web (start it with --fetch-media-urls to let "
                          "it); send the image inline as a data URL (data:image/png;base64,...)", "image_url")
    timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False) as s:
        got = await asyncio.gather(*(_get(s, u) for u in urls))
    fetched = iter(got)
    return [Media(m.kind, next(fetched)) if m.url else m for m in media]


async def _get(session: aiohttp.ClientSession, url: str) -> bytes:
    shown = url if len(url) <= 120 else url[:117] + "..."
    try:
        async with session.get(url, max_redirects=3, allow_redirects=True) as r:
            if r.status != 200:
                raise bad_request(f"the image at {shown} could not be fetched (HTTP {r.status})", "image_url")
            if (r.content_length or 0) > MAX_MEDIA_BYTES:
                raise bad_request(f"the image at {shown} is {r.content_length:,} bytes; the limit is "
                                  f"{MAX_MEDIA_BYTES:,}", "image_url")
            data = await r.content.read(MAX_MEDIA_BYTES + 1)
            if len(data) > MAX_MEDIA_BYTES:
                raise bad_request(f"the image at {shown} is larger than {MAX_MEDIA_BYTES:,} bytes", "image_url")
    except asyncio.TimeoutError:
        raise bad_request(f"the image at {shown} took longer than {FETCH_TIMEOUT_S:g} s to fetch", "image_url") from None
    except aiohttp.ClientError as e:
        raise bad_request(f"the image at {shown} could not be fetched ({type(e).__name__})", "image_url") from None
    if not data:
        raise bad_request(f"the image at {shown} is empty", "image_url")
    return data
