"""Remote-engine fixtures: an in-memory OS keyring, a scripted upstream, a Hearth app in this process."""

from __future__ import annotations

import pytest

from tests.remote.scripted import ScriptedUpstream


@pytest.fixture()
def memory_keyring():
    """A keyring backend that keeps passwords in this process only (no file, no OS service)."""
    import keyring

    from tests.remote.memory_keyring import MemoryKeyring

    before = keyring.get_keyring()
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    yield backend
    keyring.set_keyring(before)


@pytest.fixture()
def no_keyring():
    """What a machine without any keyring backend has: keyring.backends.fail.Keyring."""
    import keyring
    from keyring.backends import fail

    before = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    yield
    keyring.set_keyring(before)


@pytest.fixture()
async def scripted(aiohttp_server):
    """Factory of scripted upstreams (real aiohttp servers on 127.0.0.1)."""

    async def make(mode: str = "ok", models=("m1",)) -> ScriptedUpstream:
        up = ScriptedUpstream(mode, list(models))
        up.server = await aiohttp_server(up.app())
        return up

    return make


@pytest.fixture()
async def hearth(aiohttp_server, tmp_path):
    """A Hearth service app in this process, with no local model loaded and its own data directory."""
    from runtime.config import ServeConfig
    from runtime.server.app import create_app

    async def make(**over):
        config = ServeConfig(data_dir=tmp_path / "data", preload=False, **over)
        server = await aiohttp_server(create_app(config))
        server.url = str(server.make_url("")).rstrip("/")
        return server

    return make
