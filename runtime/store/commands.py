"""``hearth pull | list | rm | import | search``: the model store from the terminal.

``hearth pull`` downloads in this process into the Hugging Face cache; a pull that is
interrupted (Ctrl-C, a kill, a lost connection) resumes from its partial file the next time
it runs. A service downloading the same file at the same time holds the blob's lock: the
pull waits for it and then finds the file in place.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

COMMANDS = ("pull", "list", "rm", "import", "search")


def add_parsers(sub) -> None:
    p = sub.add_parser("pull", help="download a model (catalog id, id:QUANT, owner/repo[:QUANT], owner/repo/file.gguf)")
    p.add_argument("model")
    p.add_argument("--json", action="store_true", help="print progress as JSON lines")
    p = sub.add_parser("list", help="the models on this computer")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("rm", help="delete a downloaded model (an imported file is only forgotten)")
    p.add_argument("model")
    p = sub.add_parser("import", help="use a local .gguf file where it is (no copy)")
    p.add_argument("path")
    p = sub.add_parser("search", help="search the Hugging Face Hub for GGUF models")
    p.add_argument("query", help="words to search for, or owner/repo with --files")
    p.add_argument("--files", action="store_true", help="list the GGUF files of the repo QUERY")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    return {"pull": _pull, "list": _list, "rm": _rm, "import": _import, "search": _search}[args.command](args)


def _fail(message: str, code: int = 1) -> int:
    print(f"hearth: {message}", file=sys.stderr)
    return code


def human(n: int | float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def progress_line(d: dict, width: int = 28) -> str:
    total, done = d["total_bytes"], d["done_bytes"]
    frac = done / total if total else 0.0
    bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
    state = d["state"] if d["state"] != "downloading" else f"{human(d['speed_bps'])}/s ETA {_clock(d['eta_s'])}"
    return f"{d['model'][:40]:40s} {frac * 100:5.1f}% [{bar}] {human(done)}/{human(total)} {state}"


def _pull(args: argparse.Namespace) -> int:
    from runtime.store import hub
    from runtime.store.downloads import DownloadManager, NotEnoughSpace
    from runtime.store.pull_target import NothingToPull
    from runtime.store.refs import BadReference

    tty = sys.stdout.isatty() and not args.json

    async def go() -> int:
        manager = DownloadManager(None)
        await manager.start()
        try:
            d = await manager.pull(args.model)
            last = 0.0
            async for ev in manager.events():
                if ev["id"] != d.id:
                    continue
                now = time.monotonic()
                final = ev["state"] in ("completed", "failed", "cancelled")
                if args.json:
                    print(json.dumps(ev), flush=True)
                elif tty:
                    print("\r" + progress_line(ev), end="\n" if final else "", flush=True)
                elif final or now - last >= 5:
                    print(progress_line(ev), flush=True)
                    last = now
                if final:
                    break
            d = await manager.wait(d.id)
            if d.state != "completed":
                return _fail(d.error or d.state)
            if not args.json:
                print(f"{d.model_id} is ready: {d.path}")
            return 0
        finally:
            await manager.close()

    try:
        return asyncio.run(go())
    except KeyboardInterrupt:
        print("\nhearth: stopped; run the same pull again to resume where it left off", file=sys.stderr)
        return 130
    except (BadReference, NothingToPull, hub.HubError, NotEnoughSpace) as e:
        return _fail(str(e))


def _registry():
    from runtime.config import data_dir
    from runtime.store.registry import Registry

    return Registry(data_dir())


def _list(args: argparse.Namespace) -> int:
    reg = _registry()
    models = reg.models()
    if args.json:
        print(json.dumps({"models": [m.to_dict() for m in models], "disk": reg.disk_usage()}, indent=2))
        return 0
    if not models:
        print("No local models. Try: hearth pull smollm2-360m")
        return 0
    w = max(len(m.id) for m in models)
    print(f"{'ID':{w}s}  {'SIZE':>9s}  {'QUANT':8s}  {'SOURCE':8s}  PATH")
    for m in models:
        print(f"{m.id:{w}s}  {human(m.size):>9s}  {(m.quant or '-'):8s}  {m.source:8s}  {m.path}")
    disk = reg.disk_usage()
    print(f"\n{human(disk['models_bytes'])} in models; {human(disk['free_bytes'])} free in {disk['cache_dir']}")
    return 0


def _rm(args: argparse.Namespace) -> int:
    from runtime.config import data_dir
    from runtime.store.registry import ModelNotFound
    from runtime.store.resolve import UnknownModel, resolve_model

    reg = _registry()
    model_id = args.model
    try:
        reg.find(model_id)
    except ModelNotFound:
        try:  # another way of naming a local model: find its id
            model_id = resolve_model(args.model, data_dir()).id
        except (UnknownModel, ValueError) as e:
            return _fail(str(e))
    try:
        result = reg.delete(model_id)
    except ModelNotFound as e:
        return _fail(str(e))
    print(f"Deleted {result['id']}: {human(result['freed_bytes'])} freed" +
          (f" ({result['note']})" if result["note"] else ""))
    return 0


def _import(args: argparse.Namespace) -> int:
    from runtime.store.gguf_file import InvalidModelFile

    try:
        m = _registry().import_file(args.path)
    except InvalidModelFile as e:
        return _fail(f"cannot import {args.path}: {e}")
    print(f"Imported {m.id} ({human(m.size)}, {m.quant or 'unknown quantization'}): {m.path}")
    return 0


def _search(args: argparse.Namespace) -> int:
    from runtime.store import checkpoint_pull, hub

    try:
        if args.files:
            remote = hub.repo_info(args.query)
            rows = checkpoint_pull.file_summary(remote)
            if args.json:
                print(json.dumps({"repo": remote.repo_id, "files": rows}, indent=2))
            elif not rows:
                print(f"{remote.repo_id} has no GGUF files")
            for r in rows if not args.json else []:
                parts = f" ({r['parts']} parts)" if r["parts"] > 1 else ""
                if r.get("convert"):
                    print(f"{r['convert'].upper():10s} {human(r['size']):>9s}  {r['parts']} files, converted to a "
                          f"GGUF (4-bit kept) by: hearth pull {remote.repo_id}")
                    continue
                print(f"{(r['quant'] or '-'):10s} {human(r['size']):>9s}  {r['file']}{parts}")
            return 0
        hits = hub.search(args.query, args.limit)
    except hub.HubError as e:
        return _fail(str(e))
    if args.json:
        print(json.dumps({"query": args.query, "models": hits}, indent=2))
        return 0
    if not hits:
        print(f"No GGUF models match {args.query!r}")
    for h in hits:
        print(f"{h['repo']:60s} {h['downloads'] or 0:>10,} downloads")
    if hits:
        print(f"\nFiles of a repo: hearth search --files {hits[0]['repo']}")
    return 0
