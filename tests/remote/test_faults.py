"""Upstream faults, each against a scripted upstream on loopback: the client gets a clear error
in its own wire format (OpenAI, Ollama, Anthropic), the upstream's health changes, and a
failure before the first byte goes to another upstream offering the model (never after)."""

from __future__ import annotations

import asyncio

import aiohttp
import anthropic
import ollama
import openai
import pytest

from runtime.server.launcher import free_port

FAST = {"connect": 1.0, "first_byte": 0.6, "idle": 0.6}
CHAT = {"model": "m1", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}


def confirmed(hearth) -> dict:
    """The header the app sends for the user's own acts: the data directory's confirmation token."""
    from runtime.import_confirm import CONFIRM_HEADER, load_token
    from runtime.server.app_keys import CONFIG

    return {CONFIRM_HEADER: load_token(hearth.app[CONFIG].data_dir)}


async def add(hearth, name: str, url: str, **extra) -> dict:
    """Add an upstream as the user does (confirmed), serving its models by their plain names."""
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{hearth.url}/hearth/remotes", headers=confirmed(hearth),
                          json={"name": name, "url": url, "timeouts": FAST, "plain_names": True, **extra}) as r:
            assert r.status == 201, await r.text()
            return await r.json()


async def health(hearth, name: str) -> dict:
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{hearth.url}/hearth/remotes") as r:
            return next(u for u in (await r.json())["upstreams"] if u["name"] == name)["health"]


async def post(hearth, path: str, body: dict) -> tuple[int, dict, dict]:
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{hearth.url}{path}", json=body) as r:
            return r.status, dict(r.headers), await r.json(content_type=None)


def oai(hearth) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{hearth.url}/v1", api_key="unused", max_retries=0, timeout=20)


async def test_connection_refused_is_a_502_and_the_upstream_is_down(hearth):
    h = await hearth()
    async with aiohttp.ClientSession() as s:  # added while unreachable: kept, with the error
        async with s.post(f"{h.url}/hearth/remotes", json={"name": "gone", "url": f"http://127.0.0.1:{free_port()}",
                                                          "timeouts": FAST}, headers=confirmed(h)) as r:
            assert r.status == 201 and "cannot be reached" in (await r.json())["error"]
    assert (await health(h, "gone"))["state"] == "down"


async def test_error_statuses_reach_each_wire_format_clearly(hearth, scripted):
    h = await hearth()
    for mode in ("401", "429", "503"):
        up = await scripted(mode, models=[f"m-{mode}"])
        await add(h, f"u{mode}", up.url)
    # OpenAI: the upstream's 401 is Hearth's 502 (the client's own key was fine), naming the key
    with pytest.raises(openai.APIStatusError) as e:
        await oai(h).chat.completions.create(**{**CHAT, "model": "m-401"})
    assert e.value.status_code == 502 and e.value.body["code"] == "upstream_refused"
    assert "API key" in e.value.body["message"]
    assert (await health(h, "u401"))["state"] == "degraded"
    # Ollama: 429 with the upstream's Retry-After
    with pytest.raises(ollama.ResponseError) as oe:
        await ollama.AsyncClient(host=h.url).chat(model="m-429", messages=CHAT["messages"])
    assert oe.value.status_code == 429 and "rate limiting" in oe.value.error
    status, headers, body = await post(h, "/api/chat", {"model": "m-429", "messages": CHAT["messages"]})
    assert status == 429 and headers["Retry-After"] == "7" and "rate limiting" in body["error"]
    assert "slow down" not in body["error"]  # the upstream's own words stay in the service log
    # Anthropic: 503 is its overloaded_error
    with pytest.raises(anthropic.APIStatusError) as ae:
        await anthropic.AsyncAnthropic(base_url=h.url, api_key="unused", max_retries=0).messages.create(
            model="m-503", max_tokens=8, messages=CHAT["messages"])
    assert ae.value.status_code == 503 and ae.value.body["error"]["type"] == "overloaded_error"


async def test_a_stream_cut_mid_way_ends_with_an_error_event(hearth, scripted):
    up = await scripted("cut")
    h = await hearth()
    await add(h, "cut", up.url)
    got = []
    with pytest.raises(openai.APIError) as e:
        async for c in await oai(h).chat.completions.create(stream=True, **CHAT):
            if c.choices and c.choices[0].delta.content:
                got.append(c.choices[0].delta.content)
    assert got == ["Hello", " world"] and "stream" in str(e.value)
    with pytest.raises(ollama.ResponseError) as oe:
        async for _ in await ollama.AsyncClient(host=h.url).chat(model="m1", messages=CHAT["messages"], stream=True):
            pass
    assert "upstream cut" in oe.value.error and "before the reply was complete" in oe.value.error
    assert (await health(h, "cut"))["state"] in ("degraded", "down")


async def test_hangs_before_the_first_byte_and_mid_stream_time_out(hearth, scripted):
    first = await scripted("hang_first", models=["slow-start"])
    mid = await scripted("hang_mid", models=["stalls"])
    h = await hearth()
    await add(h, "first", first.url)
    await add(h, "mid", mid.url)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    status, _, body = await post(h, "/v1/chat/completions", {**CHAT, "model": "slow-start"})
    assert status == 504 and body["error"]["code"] == "upstream_timeout" and "first-byte" in body["error"]["message"]
    assert loop.time() - t0 < 5
    status, _, body = await post(h, "/api/generate", {"model": "stalls", "prompt": "Hi", "stream": False})
    assert status == 504 and "idle timeout" in body["error"]
    with pytest.raises(anthropic.APIStatusError) as ae:
        async with anthropic.AsyncAnthropic(base_url=h.url, api_key="unused", max_retries=0).messages.stream(
                model="stalls", max_tokens=8, messages=CHAT["messages"]) as stream:
            async for _ in stream:
                pass
    assert "idle timeout" in str(ae.value)
    assert (await health(h, "first"))["state"] != "up" and (await health(h, "mid"))["state"] != "up"


async def test_malformed_events_are_a_clear_502(hearth, scripted):
    up = await scripted("malformed")
    h = await hearth()
    await add(h, "bad", up.url)
    status, _, body = await post(h, "/v1/chat/completions", CHAT)
    assert status == 502 and "malformed" in body["error"]["message"]
    assert (await health(h, "bad"))["state"] == "degraded"


async def test_failover_before_the_first_byte_goes_to_the_next_upstream(hearth, scripted):
    broken, good = await scripted("503"), await scripted("ok")
    h = await hearth()
    await add(h, "a-broken", broken.url)
    await add(h, "b-good", good.url)
    reply = await oai(h).chat.completions.create(**CHAT)
    assert reply.choices[0].message.content == "Hello world!"
    assert len(broken.requests) == 1 and len(good.requests) == 1  # tried in turn (both unknown: list order)
    assert (await health(h, "a-broken"))["state"] == "degraded" and (await health(h, "b-good"))["state"] == "up"
    await oai(h).chat.completions.create(**CHAT)
    assert len(broken.requests) == 1 and len(good.requests) == 2  # the healthy one first now


async def test_a_refused_connection_fails_over_too(hearth, scripted):
    good = await scripted("ok")
    h = await hearth()
    await add(h, "a-gone", "http://127.0.0.1:1")  # nothing listens on port 1
    await add(h, "b-good", good.url)
    assert (await oai(h).chat.completions.create(**CHAT)).choices[0].message.content == "Hello world!"


async def test_no_failover_once_the_reply_has_started(hearth, scripted):
    cut, good = await scripted("cut"), await scripted("ok")
    h = await hearth()
    await add(h, "a-cut", cut.url)
    await add(h, "b-good", good.url)
    status, _, body = await post(h, "/v1/chat/completions", CHAT)
    assert status == 502 and "before the reply was complete" in body["error"]["message"]
    assert len(cut.requests) == 1 and good.requests == []


async def test_a_client_that_leaves_cancels_the_upstream_request(hearth, scripted):
    up = await scripted("slow")
    h = await hearth()
    await add(h, "slow", up.url)
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{h.url}/v1/chat/completions", json={**CHAT, "stream": True}) as r:
            async for line in r.content:
                if b"world" in line:
                    break  # leave after a few frames
    await asyncio.wait_for(up.disconnected.wait(), 5)  # the upstream saw its client go


async def test_a_service_that_stops_ends_remote_streams_properly(hearth, scripted):
    from runtime.server.app_keys import CONFIG
    from runtime.server.shutdown import graceful_stop

    up = await scripted("slow")
    h = await hearth(shutdown_grace=0.3)
    await add(h, "slow", up.url)
    lines = []
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{h.url}/v1/chat/completions", json={**CHAT, "stream": True}) as r:
            stop = None
            async for line in r.content:
                lines.append(line)
                if b"world" in line and stop is None:
                    assert h.app[CONFIG].shutdown_grace == 0.3
                    stop = asyncio.create_task(graceful_stop(h.app, h.runner))
    await stop
    body = b"".join(lines)
    assert b"shutting_down" in body and body.rstrip().endswith(b"data: [DONE]")
    await asyncio.wait_for(up.disconnected.wait(), 5)


async def test_an_upstream_that_never_accepts_the_connection_hits_the_connect_timeout(hearth, scripted):
    import socket

    from runtime.server.routes.remotes_api import REMOTES

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)  # never accepted: once its queue is full, the kernel drops new connections
    port = listener.getsockname()[1]
    filling = []
    for _ in range(4):
        c = socket.socket()
        c.setblocking(False)
        try:
            c.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        filling.append(c)
    await asyncio.sleep(0.2)
    h = await hearth()
    try:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        added = await add(h, "stuck", f"http://127.0.0.1:{port}", timeouts={**FAST, "connect": 0.4})
        assert loop.time() - t0 < 3 and added["error"]
        assert (await health(h, "stuck"))["state"] == "down"
        # as if it had listed a model before it got stuck: the request meets the connect timeout
        h.app[REMOTES].upstreams["stuck"].models = [{"id": "m1"}]
        status, _, body = await post(h, "/v1/chat/completions", CHAT)
        assert status == 504 and body["error"]["code"] == "upstream_timeout"
        assert "connect timeout" in body["error"]["message"] and loop.time() - t0 < 5
    finally:
        for c in filling:
            c.close()
        listener.close()
