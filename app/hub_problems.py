"""Hugging Face's problems in words: a hub this computer cannot reach (no network, no DNS), one
that is slow to answer, and what each of the app's hub actions (search, a model's files or card,
a download) should tell the user to do.

The service reports a hub it cannot reach with the code of every hub problem (``hub_error``)
and the sentence "cannot reach the hub at URL: REASON"; a download that fails keeps only its
error's text. Both are read here, and only here, until the service gives the case a code of its
own: the window shows "Can't reach huggingface.co: check your internet connection", never the
socket's "[Errno -2] Name or service not known".
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from app.errors import ApiProblem, ServiceUnreachable, UserError, explain

#: how long the app waits for the hub through the service: a search answers in a second or two
#: online, while the service's hub client retries a lost network for about 24 s before it says so
HUB_WAIT_S = 8.0
HUB_UNREACHABLE = "hub_unreachable"
DEFAULT_HOST = "huggingface.co"

_SERVICE_SAYS = re.compile(r"cannot reach the hub at (\S+?):? ")
#: what a resolver or a socket says when there is no way to the host (aiohttp's and the OS's words)
_NO_ROUTE = re.compile(r"Name or service not known|Temporary failure in name resolution|nodename nor servname|"
                       r"getaddrinfo failed|Network is unreachable|No route to host|Cannot connect to host (\S+?):",
                       re.IGNORECASE)


def unreachable_host(text: str) -> str | None:
    """The hub's host when ``text`` says it could not be reached (None when it says something
    else: a refusal, a missing repository, a full disk)."""
    m = _SERVICE_SAYS.search(text)
    if m:
        return urlsplit(m.group(1)).hostname or DEFAULT_HOST
    m = _NO_ROUTE.search(text)
    if m:
        return m.group(1) if m.lastindex and m.group(1) else DEFAULT_HOST
    return None


def offline(title: str, host: str, again: str) -> UserError:
    return UserError(title, f"Can't reach {host}: check your internet connection.",
                     f"{again} once this computer is online.", HUB_UNREACHABLE)


def too_slow(title: str, again: str) -> UserError:
    """The app stopped waiting for the hub (``HUB_WAIT_S``)."""
    return UserError(title, f"Hugging Face did not answer within {HUB_WAIT_S:g} seconds.",
                     f"Check your internet connection, then {again[0].lower()}{again[1:]}.", HUB_UNREACHABLE)


def hub_problem(title: str, e: ApiProblem, again: str) -> UserError:
    """``title`` with why the service could not ask the hub, and ``again`` (what to press) as
    the way out: the service not running, the hub out of reach, or what the hub answered."""
    if isinstance(e, ServiceUnreachable):
        return explain(e)
    host = unreachable_host(e.message)
    if host:
        return offline(title, host, again)
    return UserError(title, e.message, f"{again} later; the hub may be busy.", e.code or "")


def pull_problem(e: ApiProblem, from_catalog: bool) -> UserError:
    """A download the service would not start: the hub out of reach, the disk too full, a name
    that means nothing (only a typed one can be misspelt), or what the service said."""
    title = "The download could not start."
    if isinstance(e, ServiceUnreachable):
        return explain(e)
    host = unreachable_host(e.message)
    if host:
        return offline(title, host, "Press Download again")
    if e.code == "insufficient_storage":
        return UserError(f"{title[:-1]}: not enough free disk space.", e.message,
                         "Free some space, or pick a smaller quantization.", e.code)
    if not from_catalog:  # a typed name may be misspelt; a catalog entry's is not
        return UserError(title, e.message, "Check the name (a catalog id, owner/repo or owner/repo:QUANT), then "
                         "press Download again.", e.code or "")
    return UserError(title, e.message, "Press Download again in a moment.", e.code or "")


def download_failed(what: str, error: str) -> UserError:
    """A download that failed part way, from its error's text."""
    host = unreachable_host(error)
    if host:
        return offline("The download stopped.", host, f"Press Resume for {what}")
    if re.search(r"disk is full|no space left", error, re.IGNORECASE):
        return UserError("The download stopped: the disk is full.", f"{what}: {error}",
                         "Free some disk space, then press Resume.", "download_failed")
    return UserError("The download failed.", f"{what}: {error}", "Press Resume to try again.", "download_failed")
