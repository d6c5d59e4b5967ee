"""The ``hearth`` command: serve the API, chat from the terminal, print the version."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

from runtime import __version__
from runtime.config import DEFAULT_HOST, DEFAULT_MODEL, DEFAULT_PORT, EngineConfig, ServeConfig, serve_config
from runtime.store import commands as store_commands


def _mib(text: str) -> int:
    """A cache size in MiB: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of MiB, 0 or more, got {text!r}")
    return value


def _endpoints(text: str) -> tuple:
    from runtime.backends.rpc_endpoint import RpcEndpointError, parse_endpoints

    try:
        return parse_endpoints(text)
    except RpcEndpointError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _template_file(path: str) -> str:
    """``--chat-template-file``: the file's text, checked to render a conversation."""
    from runtime.chat.template_check import TemplateRefused, check_template, read_template_file

    try:
        source = read_template_file(path)
    except TemplateRefused as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    try:
        check_template(source)
    except TemplateRefused as e:
        raise argparse.ArgumentTypeError(f"{e}; try it with `hearth template MODEL --template {path}`") from None
    return source


def _serve_args(p: argparse.ArgumentParser) -> None:
    from runtime.server.serve_options import add_api_args, add_router_args

    e = EngineConfig()  # the defaults are the config's
    p.add_argument("--host", default=DEFAULT_HOST, help="address to bind (default %(default)s)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default %(default)s)")
    p.add_argument("--model", default=DEFAULT_MODEL, help="default model: catalog id or .gguf path")
    p.add_argument("--parallel", type=int, default=e.parallel, help="requests decoded together (default %(default)s)")
    p.add_argument("--ctx", type=int, default=e.ctx,
                   help="KV capacity in tokens, across requests (default: per model, the trained context "
                        "up to 32768, smaller where memory is short)")
    p.add_argument("--batch", type=int, default=e.n_batch, help="token budget of one step (default %(default)s)")
    p.add_argument("--threads", type=int, default=e.threads, help="CPU threads (default: physical cores)")
    p.add_argument("--kv-type", choices=["f16", "q8_0", "q4_0"], default=e.kv_type,
                   help="K and V cache type (quantized types turn flash attention on; default: f16, or "
                        "q8_0 where only that holds the default context)")
    p.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto",
                   help="flash attention (auto: llama.cpp decides; quantized V needs it)")
    p.add_argument("--block-size", type=int, default=e.block_size, help="KV block size in tokens (default %(default)s)")
    p.add_argument("--no-prefix-cache", action="store_true", help="recompute every prompt from scratch")
    p.add_argument("--cache-fraction", type=float, default=e.cache_fraction,
                   help="share of the KV capacity that idle prefix cache may keep (default %(default)s)")
    p.add_argument("--cache-ram", type=_mib, default=e.cache_ram, metavar="MIB",
                   help="MiB of host memory for prefix cache evicted from the KV pool (default: a quarter of "
                        "the RAM available after the model loads, 256 MiB to 16 GiB); 0 disables it")
    p.add_argument("--cache-disk", type=_mib, default=os.environ.get("HEARTH_CACHE_DISK", str(e.cache_disk)),
                   metavar="MIB", help="MiB of disk for the prompt cache in the data directory, kept across "
                   "restarts and model switches (default $HEARTH_CACHE_DISK or %(default)s); 0 disables it")
    p.add_argument("--draft", help="speculative decoding: a draft model with the same tokenizer (catalog id "
                   "or .gguf path), or 'ngram' for prompt lookup; 'off' disables a catalog default")
    p.add_argument("--rpc", type=_endpoints, metavar="HOST:PORT[,...]",
                   help="lend memory from `hearth rpc-worker`s on other machines: a model's layers are split "
                        "over them and this machine by free memory (private networks only: the RPC protocol "
                        "has no authentication)")
    p.add_argument("--chat-template-file", type=_template_file, metavar="FILE",
                   help="a Jinja chat template for the default model instead of its own (as llama-server's flag); "
                        "other models take the template stored for them, if any")
    add_api_args(p)
    add_router_args(p)


def _config(args: argparse.Namespace) -> ServeConfig:
    from runtime.config import data_dir
    from runtime.server.serve_options import serve_api_key

    directory = data_dir()
    return serve_config(args, directory, serve_api_key(args, directory))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hearth", description="Run language models on your own computer.")
    parser.add_argument("--version", action="version", version=f"hearth {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the OpenAI-compatible API")
    _serve_args(serve)
    probe = sub.add_parser("probe", help="what this machine has: CPU, RAM, GPUs, llama.cpp backends")
    probe.add_argument("--json", action="store_true")
    probe.add_argument("--rpc", type=_endpoints, default=(), metavar="HOST:PORT[,...]",
                       help="also list these RPC workers' devices and state")
    probe.add_argument("--calibrate", action="store_true",
                       help="also decode the embedded models (a few seconds) to calibrate speed predictions")
    fit = sub.add_parser("fit", help="will a model fit, where, at which context, how fast")
    fit.add_argument("model", help="catalog id or .gguf path")
    fit.add_argument("--ctx", type=int, help="context to plan for (default: the trained context up to 32768)")
    fit.add_argument("--kv-type", choices=["f16", "q8_0", "q4_0"], default=EngineConfig().kv_type)
    fit.add_argument("--draft", help="a draft model for speculative decoding (id or path)")
    fit.add_argument("--parallel", type=int, default=EngineConfig().parallel,
                     help="sequences planned for (default %(default)s)")
    fit.add_argument("--split-mode", choices=["layer", "row"], default="layer",
                     help="several GPUs: split by layers (any backend) or by rows (CUDA)")
    fit.add_argument("--rpc", type=_endpoints, default=(), metavar="HOST:PORT[,...]",
                     help="plan with these RPC workers' devices beside this machine's")
    fit.add_argument("--json", action="store_true")
    from runtime.server.serve_options import add_key_command

    add_key_command(sub)
    run = sub.add_parser("run", help="chat with a model in the terminal")
    run.add_argument("model", nargs="?", default=DEFAULT_MODEL)
    run.add_argument("prompt", nargs="?", help="one prompt; without it, an interactive chat")
    run.add_argument("--port", type=int, default=DEFAULT_PORT, help="use the service on this port if one runs")
    run.add_argument("--max-tokens", type=int, default=512)
    run.add_argument("--temperature", type=float, default=0.8)
    store_commands.add_parsers(sub)
    from runtime import terminal_embed

    terminal_embed.add_parser(sub)
    from runtime import launch

    launch.add_parser(sub)
    from runtime.remote import cli as remote_cli

    remote_cli.add_parser(sub)
    from runtime.quantize import command as quantize_command

    quantize_command.add_parser(sub)
    from runtime import rpc_worker

    rpc_worker.add_parser(sub)
    from runtime import template_command

    template_command.add_parser(sub)
    desktop = sub.add_parser("app", help="open the desktop app (starts the service if none runs)")
    desktop.add_argument("--port", type=int, help="the service's port (default: the app's setting)")
    desktop.add_argument("--tray", action="store_true", help="start in the tray without opening the window (start on login)")
    desktop.add_argument("--smoke-test", action="store_true",
                         help="open the main window, wait for the service, print what happened, quit (exit 0 when both came up)")
    return parser


async def _start_site(config: ServeConfig):
    from aiohttp import web

    from runtime.server.app import create_app

    from runtime.server.connections import GuardedRunner, limits_of

    app = create_app(config)
    runner = GuardedRunner(app, limits_of(config.security), handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, config.security.host, config.port)
    try:
        await site.start()
    except OSError as e:
        await runner.cleanup()
        raise SystemExit(f"hearth: cannot listen on {config.security.host}:{config.port}: {e.strerror}. "
                         "Is another server using that port? Choose one with --port.") from None
    port = runner.addresses[0][1]
    if config.ollama_port is not None:
        await _start_ollama_site(runner, config)
    return app, runner, port


async def _start_ollama_site(runner, config: ServeConfig) -> None:
    """The same app on Ollama's port as a second site; a taken port stops the start with the reason."""
    from aiohttp import web

    try:
        await web.TCPSite(runner, config.security.host, config.ollama_port).start()
    except OSError as e:
        await runner.cleanup()
        raise SystemExit(f"hearth: cannot listen on {config.security.host}:{config.ollama_port} for --ollama-port: "
                         f"{e.strerror}. Is Ollama (or another Hearth) running there? Stop it, or leave "
                         "--ollama-port out.") from None


def _warm_start():
    """Begin what the default model's load waits for before the service imports its API: a
    spare engine worker doing its imports (``runtime.engine.spare``) and then the hardware
    probe (asked from a thread). The first token then comes after the longer of the two
    start-ups instead of after their sum. Returns the probe's future."""
    from concurrent.futures import ThreadPoolExecutor

    from runtime.engine import spare

    spare.start()
    pool = ThreadPoolExecutor(1, thread_name_prefix="hearth-probe")
    probe = pool.submit(spare.probe)
    pool.shutdown(wait=False)
    return probe


def _warm_start_pays() -> bool:
    """Whether to overlap the start-ups (``_warm_start``): ``HEARTH_WARM_START`` (1 or 0)
    decides; otherwise with at least 2 CPUs. Since the probe runs in the spare (one llama.cpp
    import, not two), the overlap came to the first token 0.81x as soon on 2 cores (Gemma 3 270M,
    ``bench/footprint.py --warm-start-ab``); on one CPU the two start-ups only take turns."""
    chosen = os.environ.get("HEARTH_WARM_START")
    if chosen in ("0", "1"):
        return chosen == "1"
    return (os.cpu_count() or 1) >= 2


async def serve(config: ServeConfig) -> None:
    from runtime.engine import spare

    probe = _warm_start() if _warm_start_pays() else None
    from runtime.server.app_keys import MANAGER

    app, runner, port = await _start_site(config)
    app[MANAGER].early_hardware = probe
    url = f"http://{config.security.host}:{port}"
    print(f"Hearth {__version__} listening on {url}  (OpenAI API at {url}/v1)", flush=True)
    if config.ollama_port is not None:
        print(f"Also listening on Ollama's port: http://{config.security.host}:{config.ollama_port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        engine = await app[MANAGER].engine_for(None)
        print(f"Model {engine.model_id} ready. Try:\n  curl {url}/v1/chat/completions "
              f"-H 'Content-Type: application/json' -d '{{\"messages\":[{{\"role\":\"user\",\"content\":\"Hello\"}}],\"stream\":true}}'",
              flush=True)
    except Exception as e:  # the service still runs; /health reports the error
        print(f"hearth: the default model could not be loaded: {e}", file=sys.stderr, flush=True)
    await asyncio.to_thread(spare.discard)  # unused (an embedding or remote model): its memory goes back
    await stop.wait()
    print("Hearth: stopping", flush=True)
    from runtime.server.shutdown import graceful_stop

    await graceful_stop(app, runner)


def run_service_loop(coro):
    """Run the service on uvloop where it is installed: its per-token overhead (one pipe
    read and one socket write per stream per step) is a fraction of asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def _probe(args: argparse.Namespace) -> int:
    import json

    from runtime.hardware.probe import probe
    from runtime.hardware.report import format_probe_report

    rpc = [str(ep) for ep in args.rpc]
    info = probe(rpc=rpc)
    if args.calibrate:
        from runtime.hardware.calibrate import calibrate_decode

        calibrate_decode(hardware=info, repeats=2)
        info = probe(rpc=rpc)
    print(json.dumps(info.to_dict(), indent=2) if args.json else format_probe_report(info))
    return 0


def _fit(args: argparse.Namespace) -> int:
    import json

    from runtime.config import data_dir
    from runtime.hardware.fit import plan_fit
    from runtime.hardware.probe import probe
    from runtime.hardware.report import format_fit_report
    from runtime.store.gguf_file import InvalidModelFile
    from runtime.hardware.model_shape import model_shape
    from runtime.store.resolve import UnknownModel

    try:
        shape = model_shape(args.model, data_dir())  # a catalog model is sized before download
        draft = model_shape(args.draft, data_dir()) if args.draft else None
        plan = plan_fit(shape, probe(rpc=[str(ep) for ep in args.rpc]), ctx=args.ctx, kv_type=args.kv_type, draft=draft, n_seq=args.parallel,
                        split_mode=args.split_mode)
    except (UnknownModel, InvalidModelFile, ValueError) as e:
        print(f"hearth: {e}", file=sys.stderr)
        return 1
    print(json.dumps(plan.to_dict(), indent=2) if args.json else format_fit_report(plan))
    return 0 if plan.fits else 2


def main(argv: list[str] | None = None) -> int:
    from runtime.launch import split_client_args

    argv, client_args = split_client_args(sys.argv[1:] if argv is None else list(argv))
    args = build_parser().parse_args(argv)
    args.client_args = client_args
    if args.command == "probe":
        return _probe(args)
    if args.command == "fit":
        return _fit(args)
    if args.command == "key":
        from runtime.config import data_dir
        from runtime.server.serve_options import key_command

        return key_command(args, data_dir())
    if args.command == "launch":
        from runtime import launch

        return launch.run(args)
    if args.command == "remote":
        from runtime.remote import cli as remote_cli

        return remote_cli.run(args)
    if args.command == "rpc-worker":
        from runtime import rpc_worker

        return rpc_worker.run(args)
    if args.command in ("quantize", "convert"):
        from runtime.quantize import command as quantize_command

        return quantize_command.run(args)
    if args.command == "template":
        from runtime import template_command

        return template_command.run(args)
    if args.command in store_commands.COMMANDS:
        return store_commands.run(args)
    if args.command == "app":
        import importlib  # the command only launches the app: nothing in runtime depends on it

        return importlib.import_module("app.main").run(args.port, tray=args.tray, smoke_test=args.smoke_test)
    if args.command == "serve":
        run_service_loop(serve(_config(args)))
    elif args.command == "run":
        from runtime.terminal_chat import run_chat

        return asyncio.run(run_chat(args, _start_site))
    elif args.command == "embed":
        from runtime.terminal_embed import run_embed

        return asyncio.run(run_embed(args, _start_site))
    return 0


if __name__ == "__main__":
    sys.exit(main())
