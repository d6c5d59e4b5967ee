"""Fixtures the hardening tests share with the remote-engine tests: an in-process Hearth app and
scripted upstreams, both real aiohttp servers on 127.0.0.1."""

from tests.remote.conftest import hearth, scripted  # noqa: F401 - fixtures, found by name
