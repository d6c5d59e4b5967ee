"""Small pieces of the app: settings, the numbers under an answer, Markdown, error words, fit badges."""

from __future__ import annotations

from app.chat import _numbers, _title, acceptance_rate
from app.errors import ApiProblem, NotHearth, ServiceUnreachable, explain
from app.models import fit_badge
from app.settings import AppSettings, SettingsStore
from app.ui.markdown import markdown_html
from app.ui.message_view import stats_line
from app.ui.server_page import counters


def test_settings_round_trip_and_damage(tmp_path):
    store = SettingsStore(tmp_path / "s.json")
    s = store.load()
    assert (s.port, s.host, s.keep_in_tray) == (4327, "127.0.0.1", True)
    s.port, s.kv_type, s.start_on_login = 5000, "q8_0", True
    store.save(s)
    assert store.load() == s
    (tmp_path / "s.json").write_text('{"port": "not a number", "ctx": true, "parallel": 2}')
    t = store.load()
    assert (t.port, t.ctx, t.parallel) == (4327, 0, 2)  # wrong types ignored, good ones kept
    # a file from before the service chose the context: its fixed defaults become that choice,
    # a context the user set stays
    (tmp_path / "s.json").write_text('{"ctx": 8192, "kv_type": "f16", "parallel": 2}')
    assert (store.load().ctx, store.load().kv_type) == (0, "")
    (tmp_path / "s.json").write_text('{"ctx": 16384, "kv_type": "q8_0"}')
    assert (store.load().ctx, store.load().kv_type) == (16384, "q8_0")
    (tmp_path / "s.json").write_text('{"ctx": 8192, "kv_type": "f16", "version": 2}')
    assert (store.load().ctx, store.load().kv_type) == (8192, "f16")
    (tmp_path / "s.json").write_text("{broken")
    assert store.load() == AppSettings() and (tmp_path / "s.damaged").exists()


def test_settings_validation_and_serve_args():
    assert AppSettings().validate() is None
    assert "port" in AppSettings(port=0).validate()
    assert "KV type" in AppSettings(kv_type="q2").validate()
    s = AppSettings(default_model="gemma-3-270m", draft_model="smollm2-135m", ctx=4096, parallel=2)
    assert s.serve_args() == ["--model", "gemma-3-270m", "--ctx", "4096", "--parallel", "2", "--draft", "smollm2-135m"]
    # an empty setting adds no flag: the service's own choice (the context and KV type per model)
    assert not {"--draft", "--ctx", "--kv-type"} & set(AppSettings().serve_args())
    assert "context" in AppSettings(ctx=100).validate()


def test_hearth_serve_accepts_every_flag_the_app_sends():
    """The app owns its list of ``hearth serve`` flags; the command's own parser reads them back."""
    from runtime.cli import build_parser

    s = AppSettings(default_model="gemma-3-270m", draft_model="smollm2-135m", ctx=4096, parallel=2,
                    kv_type="q8_0", ollama_port=True)
    serve = build_parser().parse_args(["serve", *s.serve_args()])
    assert (serve.model, serve.draft, serve.ctx, serve.parallel, serve.kv_type, serve.ollama_port) == (
        "gemma-3-270m", "smollm2-135m", 4096, 2, "q8_0", 11434)


def test_numbers_under_an_answer():
    usage = {"prompt_tokens": 30, "completion_tokens": 21, "prompt_tokens_details": {"cached_tokens": 16},
             "speculative": {"drafted": 40, "accepted": 30, "acceptance_rate": 0.75}}
    n = _numbers(10.0, 10.25, 12.25, usage)
    assert n == {"ttft_s": 0.25, "tokens_per_s": 10.0, "completion_tokens": 21, "prompt_tokens": 30,
                 "cached_tokens": 16, "acceptance_rate": 0.75}
    line = stats_line({**n, "model": "smollm2-135m", "finish": "stop"})
    assert line == ("smollm2-135m · 10.0 tok/s · 21 tokens · first token 250 ms · "
                    "16/30 prompt tokens cached · draft acceptance 75%")
    assert "acceptance" not in stats_line(_numbers(0, 0.1, 1, {"completion_tokens": 3}))
    assert acceptance_rate({"speculative": {"drafted": 0, "accepted": 0}}) is None
    assert acceptance_rate({}) is None
    assert _numbers(0.0, None, 1.0, {}) == {}  # stopped before the first token


def test_titles_are_one_short_line():
    assert _title("  Hello\n  world ") == "Hello world"
    long = _title("word " * 40)
    assert len(long) <= 48 and long.endswith("…")


def test_markdown_renders_code(qapp):
    html = markdown_html("Roses\nViolets\n\n```python\nprint('hi')\nx = 1\n```\n\n**bold**")
    assert "Roses Violets" in html  # a single newline is a soft break (tests/app/test_markdown.py)
    assert "print(&#x27;hi&#x27;)" in html or "print('hi')" in html
    assert "background-color" in html  # the code block is shaded
    assert "font-weight" in html  # bold


def test_errors_in_plain_words():
    too_big = explain(ApiProblem("model needs 5.1 GB, 3.2 GB free", status=400, code="model_does_not_fit"))
    assert too_big.title == "This model is too big for this computer." and "5.1 GB" in too_big.detail
    assert "smaller" in too_big.action
    assert "Start the server" in explain(ServiceUnreachable("no answer")).action
    assert "Port 80 is used by another program" in explain(NotHearth("x"), port=80).title
    assert explain(ApiProblem("boom", code="download_failed")).title == "The download failed."


def test_fit_badges():
    assert fit_badge({"verdict": "gpu", "predicted_tokens_per_s": 81.2}) == ("Fits on GPU · ~81 tok/s", "#2e7d32")
    assert fit_badge({"verdict": "too_big", "predicted_tokens_per_s": 3.0})[0] == "Too big"
    assert fit_badge({"verdict": "cpu"})[0] == "Runs on CPU"
    assert fit_badge({"verdict": "cpu", "predicted_tokens_per_s": 0.4})[0] == "Runs on CPU · <1 tok/s"
    assert fit_badge(None) == ("", "")


def test_server_counters_from_stats():
    stats = {"requests_served": 7, "models": [{"id": "m", "running": 1, "waiting": 0, "tokens_generated": 99,
             "kv": {"cells_used": 40, "capacity": 2048, "preemptions": 0, "block_size": 16, "blocks_total": 128,
                    "blocks_used": 3, "blocks_cached": 2, "prefix_hit_tokens": 16, "prompt_tokens": 64,
                    "evictions": 1, "host_entries": 0, "host_hit_tokens": 0, "host_bytes": 0}}]}
    rows = dict(counters(stats))
    assert rows["Requests served"] == "7"
    assert rows["KV blocks in use"] == "3 of 128 (16 tokens each)"
    assert rows["Prompt tokens from cache"] == "16 of 64 (25%)"
    assert rows["Prefix cache"] == "2 blocks kept, 1 evicted"


def test_chat_settings_dialog_and_request_body(qapp, tmp_path):
    from app.chat import ChatService
    from app.conversations import ConversationStore, Sampling
    from app.ui.chat_page import ConversationSettingsDialog

    store = ConversationStore(tmp_path / "c.sqlite3")
    c = store.create(model="gemma-3-270m")
    d = ConversationSettingsDialog(c)
    d.system.setPlainText("Answer in French.")
    d.temperature.setValue(0.2)
    d.max_tokens.setValue(77)
    d.seed.setValue(5)
    assert d.sampling() == Sampling(0.2, 0.95, 77, 5)
    d.seed.setValue(-1)
    assert d.sampling().seed is None  # "random"

    chat = ChatService(client=None, store=store)
    chat.select(c.id)
    chat.configure(system_prompt="Answer in French.", sampling=Sampling(0.2, 0.9, 77, 5))
    reloaded = store.get(c.id)
    assert (reloaded.system_prompt, reloaded.sampling) == ("Answer in French.", Sampling(0.2, 0.9, 77, 5))
    m = store.add_message(c.id, "user", "Hello")
    body = chat._request_body(reloaded, [m])
    assert body == {"messages": [{"role": "system", "content": "Answer in French."},
                                 {"role": "user", "content": "Hello"}],
                    "temperature": 0.2, "top_p": 0.9, "max_tokens": 77, "seed": 5, "model": "gemma-3-270m",
                    "context_overflow": "truncate_middle"}  # a chat longer than the context leaves its middle out
    store.close()


def test_hearth_app_command_is_registered():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "runtime.cli", "app", "--help"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "--port" in r.stdout


async def test_api_client_sends_the_stored_key(aiohttp_server, tmp_path):
    """A service with an API key answers the app's client only when the client has the key."""

    from app.api_client import ApiClient
    from runtime.config import SecurityConfig, ServeConfig
    from runtime.server.app import create_app
    from runtime.api_key import create_key, load_key

    key = create_key(tmp_path)
    server = await aiohttp_server(create_app(ServeConfig(preload=False, security=SecurityConfig(api_key=key))))
    base = f"http://127.0.0.1:{server.port}"
    with_key, without = ApiClient(base, api_key=load_key(tmp_path)), ApiClient(base)
    try:
        await with_key.health()  # the service proves it holds the key; then the client sends it
        assert with_key.key_trusted
        stats = await with_key.get("/hearth/stats")
        assert "models" in stats
        try:
            await without.get("/hearth/stats")
        except ApiProblem as e:
            assert e.status == 401
        else:
            raise AssertionError("the service answered a client without its key")
    finally:
        await with_key.close()
        await without.close()


async def test_api_client_keeps_the_key_from_a_service_that_cannot_prove_it_is_this_hearth(aiohttp_server, tmp_path):
    """Another program on the port that answers like Hearth (even relaying a real Hearth's
    proof for another port) never receives the stored key."""
    from aiohttp import web

    from app.api_client import ApiClient
    from runtime import identity
    from runtime.api_key import create_key

    key = create_key(tmp_path)
    seen: list[str | None] = []

    async def any_route(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        if request.path == "/health":
            return web.json_response({"status": "ok", "service": "hearth"})
        if request.path == identity.PATH:  # a proof made for a different port
            return web.json_response({"service": "hearth", "proof": identity.proof(key, 1, request.query["nonce"])})
        return web.json_response({"models": []})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", any_route)
    server = await aiohttp_server(app)
    client = ApiClient(f"http://127.0.0.1:{server.port}", api_key=key)
    try:
        await client.health()
        await client.get("/hearth/stats")
        assert not client.key_trusted
        assert len(seen) == 3 and seen == [None, None, None]
    finally:
        await client.close()
