"""Real OpenAI-compatible servers as upstreams, on loopback, with the embedded SmolLM2: the
llama-cpp-python project's own server (``python -m llama_cpp.server``, a third party's
implementation, with its API key on) and a second Hearth. The Hearth in front runs in this
process with its own data directory and no local model loaded."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request

import aiohttp
import ollama
import openai
import pytest

from runtime.config import SecurityConfig
from runtime.server.launcher import ServiceProcess, free_port

UPSTREAM_KEY = "llama-cpp-python-key"
HI = [{"role": "user", "content": "Say hello."}]


def _wait(url: str, proc: subprocess.Popen, headers: dict, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the upstream exited with {proc.returncode}:\n{proc.stdout.read()}")
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer in {timeout:.0f} s")


@pytest.fixture(scope="module")
def llama_cpp_server(smollm2_path):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_path), "--model_alias", "smollm2-upstream",
         "--host", "127.0.0.1", "--port", str(port), "--api_key", UPSTREAM_KEY, "--n_ctx", "2048",
         "--n_threads", "1", "--verbose", "false",
         # by default it ends a request early when the next one arrives; Hearth would rightly call that a cut stream
         "--interrupt_requests", "false"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(f"{url}/v1/models", proc, {"Authorization": f"Bearer {UPSTREAM_KEY}"})
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture(scope="module")
def hearth_upstream(smollm2_path):
    s = ServiceProcess("--parallel", "2", "--ctx", "4096", "--threads", "1").wait_ready()
    yield s
    s.stop()


async def _add(url: str, body: dict, headers: dict | None = None) -> dict:
    async with aiohttp.ClientSession(headers=headers) as s:
        async with s.post(f"{url}/hearth/remotes", json=body) as r:
            assert r.status == 201, await r.text()
            return await r.json()


async def test_llama_cpp_python_server_through_hearth(hearth, llama_cpp_server, memory_keyring):
    h = await hearth(security=SecurityConfig(api_key="front-key"))
    auth = {"Authorization": "Bearer front-key"}
    wrong = await _add(h.url, {"name": "wrong", "url": llama_cpp_server, "api_key": "not-the-key"}, auth)
    assert "401" in wrong["error"] and wrong["models"] == []
    added = await _add(h.url, {"name": "lcp", "url": llama_cpp_server, "api_key": UPSTREAM_KEY,
                               "plain_names": True}, auth)
    assert added["error"] is None and added["models"] == ["smollm2-upstream"]
    client = openai.AsyncOpenAI(base_url=f"{h.url}/v1", api_key="front-key", max_retries=0, timeout=120)
    models = {m.id: m for m in (await client.models.list()).data}
    assert models["smollm2-upstream"].owned_by == "lcp"
    reply = await client.chat.completions.create(model="smollm2-upstream", messages=HI, max_tokens=12,
                                                 temperature=0)
    assert reply.choices[0].message.content and reply.choices[0].finish_reason in ("stop", "length")
    pieces = []
    async for c in await client.chat.completions.create(model="smollm2-upstream", messages=HI, max_tokens=12,
                                                        temperature=0, stream=True):
        if c.choices and c.choices[0].delta.content:
            pieces.append(c.choices[0].delta.content)
    assert len(pieces) > 1 and "".join(pieces).strip()  # streamed piece by piece
    text = await client.completions.create(model="smollm2-upstream", prompt="The capital of France is",
                                           max_tokens=6, temperature=0)
    assert text.choices[0].text.strip()
    # Hearth's own key still guards it
    bad = openai.AsyncOpenAI(base_url=f"{h.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        await bad.chat.completions.create(model="smollm2-upstream", messages=HI, max_tokens=4)


async def test_a_second_hearth_as_upstream_and_cancellation_reaches_it(hearth, hearth_upstream):
    from tests.remote.test_faults import confirmed

    h = await hearth()
    added = await _add(h.url, {"name": "hearth2", "url": hearth_upstream.url}, confirmed(h))
    assert "smollm2-135m" in added["models"]
    name = "smollm2-135m@hearth2"  # the front Hearth has the embedded model too: the local one keeps its name
    olla = await ollama.AsyncClient(host=h.url).chat(model=name, messages=HI, options={"num_predict": 8})
    assert olla.message.content and olla.done
    async with aiohttp.ClientSession() as s:
        body = {"model": name, "messages": [{"role": "user", "content": "Count from 1 to 2000: 1, 2, 3,"}],
                "max_tokens": 3000, "temperature": 0, "stream": True}
        async with s.post(f"{h.url}/v1/chat/completions", json=body) as r:
            assert r.status == 200
            n = 0
            async for line in r.content:
                if line.startswith(b"data: {"):
                    n += 1
                if n >= 5:
                    break
            running = [m["running"] for m in hearth_upstream.stats()["models"]]
            assert running == [1]  # the upstream is generating
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stats = hearth_upstream.stats()["models"]
        if stats and stats[0]["running"] == 0:
            break
        await asyncio.sleep(0.1)
    assert stats[0]["running"] == 0, json.dumps(stats)
    assert stats[0]["tokens_generated"] < 1500  # it stopped long before max_tokens
