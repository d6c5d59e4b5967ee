"""``hearth quantize MODEL --to SIZE|BPW|MIX``: a smaller GGUF, its quality measured, registered."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from runtime.private_files import private_umask_for
from runtime.quantize.calibration import CALIBRATION, HELDOUT


def add_parser(sub) -> None:
    p = sub.add_parser("quantize", help="make a smaller GGUF of a model, bits spent where they matter")
    p.add_argument("model", help="model id or .gguf path")
    p.add_argument("--to", required=True, dest="target",
                   help="file size (90MB, 1.2GB), bits per weight (4.5bpw) or a llama.cpp mix (Q4_K_M)")
    p.add_argument("--calibration", type=Path, default=CALIBRATION,
                   help="text the importance and sensitivity are measured on (default: Hearth's own)")
    p.add_argument("--heldout", type=Path, default=HELDOUT, help="text the quality is measured on")
    p.add_argument("--output", type=Path, help="the new file (default: beside the model)")
    p.add_argument("--chunk", type=int, default=256, help="tokens per measured chunk")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--no-compare", action="store_true", help="skip making and measuring the stock mix")
    p.add_argument("--no-register", action="store_true", help="do not add the file to the local models")
    p.add_argument("--json", action="store_true", help="progress and the result as JSON lines")
    p = sub.add_parser("convert", help="a GPTQ or AWQ checkpoint (a folder of safetensors) to a GGUF, 4-bit kept")
    p.add_argument("folder", type=Path, help="the checkpoint's folder: config.json, *.safetensors, tokenizer.json")
    p.add_argument("--output", type=Path, help="the GGUF (default: FOLDER/<name>.gguf)")
    p.add_argument("--name", help="the model's name in the GGUF (default: the folder's name)")
    p.add_argument("--no-register", action="store_true", help="do not add the file to the local models")
    p.add_argument("--memory-limit", type=int, metavar="BYTES",
                   help="stop with an error past this much memory (Linux; a pull sets it from the checkpoint's size)")


def _source(ref: str) -> Path:
    p = Path(ref).expanduser()
    if p.suffix.lower() == ".gguf" and p.is_file():
        return p.resolve()
    from runtime.config import data_dir
    from runtime.store.resolve import resolve_model

    return Path(resolve_model(ref, data_dir()).path)


def _report(r) -> str:
    q, lines = r.quality, []
    lines.append(f"{r.path}  {r.size / 1e6:.1f} MB")
    lines.append(f"  KL to source {q.kl_mean:.4f} nats/token (p99 {q.kl_p99:.3f}), same top token "
                 f"{q.top1_agree * 100:.1f}%, perplexity {q.perplexity:.2f} (source {r.source_perplexity:.2f})")
    if r.stock_quality is not None:
        s = r.stock_quality
        lines.append(f"  llama.cpp {r.stock} with the same importance: {r.stock_size / 1e6:.1f} MB, KL {s.kl_mean:.4f}, "
                     f"same top token {s.top1_agree * 100:.1f}%, perplexity {s.perplexity:.2f}")
    lines.append(f"  importance matrix: {r.importance_path}")
    return "\n".join(lines)


def limit_memory(limit: int | None) -> None:
    """Cap this process's address space (``RLIMIT_AS``, Linux), so that a checkpoint that asks
    for more memory than it should ends the conversion with ``MemoryError`` instead of the
    machine's memory. Set before numpy is imported: the cap covers everything after."""
    if limit is None or not sys.platform.startswith("linux"):
        return
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def convert(args: argparse.Namespace) -> int:
    limit_memory(args.memory_limit)
    try:
        from runtime.quantize.hf_import import import_checkpoint
        from runtime.quantize.hf_int4 import UnsupportedQuantization
        from runtime.quantize.safetensors_file import BadSafetensors

        folder = args.folder.expanduser().resolve()
        out = args.output or folder / f"{folder.name}.gguf"
        private_umask_for(out)
        import_checkpoint(folder, out, name=args.name)
    except MemoryError:
        limit = f"its limit of {args.memory_limit / (1 << 30):.1f} GiB" if args.memory_limit else "is free"
        print(f"hearth: converting {args.name or args.folder.name} needs more memory than {limit}", file=sys.stderr)
        return 1
    except (UnsupportedQuantization, BadSafetensors, OSError, KeyError, ValueError) as e:
        print(f"hearth: {e}", file=sys.stderr)
        return 1
    print(f"{out}  {out.stat().st_size / 1e6:.1f} MB")
    if not args.no_register:
        from runtime.config import data_dir
        from runtime.store.registry import Registry

        print(f"  registered as {Registry(data_dir()).import_file(out).id}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.command == "convert":
        return convert(args)
    from runtime.quantize.allocation import BudgetTooSmall
    from runtime.quantize.job import QuantizeCancelled, QuantizeError
    from runtime.quantize.pipeline import QuantizeOptions, default_output, quantize
    from runtime.quantize.target import BadTarget, parse_target

    try:
        target = parse_target(args.target)
        src = _source(args.model)
    except (BadTarget, LookupError, ValueError, OSError) as e:
        print(f"hearth: {e}", file=sys.stderr)
        return 1
    # the importance matrix goes beside the source, the rest beside the output
    private_umask_for(src, args.output or default_output(src, target))
    last = [""]

    def progress(step: str, done: int, total: int) -> None:
        if args.json:
            print(json.dumps({"step": step, "done": done, "total": total}), flush=True)
        elif sys.stderr.isatty():
            print(f"\r{step}: {done}/{total}   ", end="", file=sys.stderr, flush=True)
        elif step != last[0]:
            print(f"{step} ...", file=sys.stderr, flush=True)
        last[0] = step

    options = QuantizeOptions(target, args.calibration, args.heldout, args.output, args.chunk, args.threads,
                              compare=not args.no_compare)
    try:
        result = quantize(src, options, progress)
    except KeyboardInterrupt:
        print("\nhearth: stopped; run the same command again to resume from the last finished step",
              file=sys.stderr)
        return 130
    except (QuantizeCancelled, QuantizeError, BudgetTooSmall, ValueError, OSError) as e:
        print(f"\nhearth: {e}", file=sys.stderr)
        return 1
    if sys.stderr.isatty() and not args.json:
        print(file=sys.stderr)
    model_id = None
    if not args.no_register:
        from runtime.config import data_dir
        from runtime.store.registry import Registry

        model_id = Registry(data_dir()).import_file(result.path).id
    if args.json:
        print(json.dumps({"result": result.to_dict() | {"model_id": model_id}}))
    else:
        print(_report(result))
        if model_id:
            print(f"  registered as {model_id}")
    return 0
