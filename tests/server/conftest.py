"""A real ``hearth serve`` process on a free loopback port."""

from __future__ import annotations

import pytest

from runtime.server.launcher import ServiceProcess


def live_server(*args: str) -> ServiceProcess:
    return ServiceProcess(*args).wait_ready()


@pytest.fixture(scope="module")
def server(smollm2_path):
    s = live_server("--parallel", "4", "--ctx", "4096")
    yield s
    s.stop()


@pytest.fixture()
def oai(server):
    from openai import OpenAI

    return OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)
