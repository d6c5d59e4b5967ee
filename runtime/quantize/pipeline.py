"""``hearth quantize``: importance, sensitivity, allocation, the file, its measured quality.

Each step's result is kept, so a run that was stopped resumes where it was: the importance
matrix beside the source model (``<model>.imatrix.gguf``, llama.cpp's format) and the
sensitivity measured with it (``<model>.sensitivity.json``: quantizing to another size reuses
both), the stock file in ``<output>.work/`` (removed when the run ends), the output written as
``.part`` and renamed when complete.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from runtime.backends.imatrix import collect_importance, tokenize_text
from runtime.backends.quantize import QuantizeSpec
from runtime.quantize import imatrix_file
from runtime.quantize.allocation import allocate
from runtime.quantize.calibration import CALIBRATION, HELDOUT, read_text, signature
from runtime.quantize.imatrix_file import Importance
from runtime.quantize.job import run_quantize
from runtime.quantize.quality import Quality, Reference
from runtime.quantize.sensitivity import Sensitivity, measure
from runtime.quantize.target import Target
from runtime.quantize.types import type_id
from runtime.quantize.weights import SourceWeights

Progress = Callable[[str, int, int], None]
PROBE_CHUNKS = 2  #: calibration chunks the role probes compare on


@dataclass(slots=True)
class QuantizeOptions:
    target: Target
    calibration: Path = CALIBRATION
    heldout: Path = HELDOUT
    output: Path | None = None
    chunk: int = 256
    threads: int = 0
    compare: bool = True  #: also make and measure the stock mix of the same size


@dataclass(slots=True)
class QuantizeResult:
    path: Path
    size: int
    types: dict[str, str]  #: tensor -> type chosen
    quality: Quality
    source_perplexity: float
    importance_path: Path
    stock: str | None = None
    stock_size: int | None = None
    stock_quality: Quality | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = {"path": str(self.path), "size": self.size, "quality": self.quality.to_dict(),
             "source_perplexity": self.source_perplexity, "importance": str(self.importance_path),
             "stock": self.stock, "stock_size": self.stock_size,
             "stock_quality": self.stock_quality.to_dict() if self.stock_quality else None,
             "seconds": self.seconds, "types": self.types}
        return d


def default_output(src: Path, target: Target) -> Path:
    return src.with_name(f"{src.stem}.hearth-{target.label()}.gguf")


def importance_for(src: Path, text: str, chunks: list[list[int]], sig: str, threads: int,
                   fallback_dir: Path, progress: Progress) -> tuple[Importance, Path]:
    """The importance matrix beside ``src`` (reused when measured on the same text)."""
    path = imatrix_file.path_beside(src)
    for p in (path, fallback_dir / path.name):
        if p.is_file():
            imp = imatrix_file.load(p)
            if imp.datasets == [sig]:
                return imp, p
    sums = collect_importance(src, chunks, threads, lambda i: progress("importance", i, len(chunks)))
    imp = Importance(sums.sums, sums.counts, [sig], len(chunks), len(chunks[0]))
    try:
        return imp, imatrix_file.save(imp, path)
    except OSError:  # a read-only model folder: keep it beside the output instead
        return imp, imatrix_file.save(imp, fallback_dir / path.name)


def _sensitivity(cache: Path, sig: str, weights: SourceWeights, imp: Importance, ref: Reference,
                 threads: int, progress: Progress) -> Sensitivity:
    """Measured once per importance matrix, kept beside it: other sizes reuse it."""
    if cache.is_file():
        d = json.loads(cache.read_text())
        if d.get("importance") == sig:
            return Sensitivity.from_dict(d["sensitivity"])
    s = measure(weights, imp, ref, threads, progress)
    cache.write_text(json.dumps({"importance": sig, "sensitivity": s.to_dict()}))
    return s


def _means(imp: Importance) -> dict:
    return {n: m for n in imp.sums if (m := imp.mean(n)) is not None}


def quantize(src: Path, options: QuantizeOptions, progress: Progress = lambda *a: None,
             cancel: threading.Event | None = None) -> QuantizeResult:
    src = Path(src)
    out = Path(options.output or default_output(src, options.target))
    work = out.with_name(out.name + ".work")
    work.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    clock = time.monotonic()

    def lap(step: str) -> None:
        nonlocal clock
        now = time.monotonic()
        seconds[step] = round(now - clock, 2)
        clock = now

    weights = SourceWeights(src)
    text = read_text(options.calibration)
    sig = signature(text, options.chunk)
    cal = tokenize_text(src, text, options.chunk)
    held = tokenize_text(src, read_text(options.heldout), options.chunk)
    if not cal or not held:
        raise ValueError(f"the calibration and held-out texts need {options.chunk} tokens each at least")
    imp, imp_path = importance_for(src, text, cal, sig, options.threads, out.parent, progress)
    lap("importance")
    means = _means(imp)
    ref = Reference(src, cal[:PROBE_CHUNKS], options.threads)
    stock = options.target.nearest_stock(weights.n_weights(), weights.fixed_bytes) if options.compare \
        or options.target.stock else None
    stock_path = work / f"stock-{stock}.gguf" if stock else None
    if stock is not None and stock_path is not None and not stock_path.is_file():
        run_quantize(src, stock_path, QuantizeSpec(stock, {}, means, options.threads),
                     lambda d, t, n: progress(f"stock {stock}", d, t), cancel)
    lap("stock")
    budget = options.target.budget(weights.n_weights(), weights.fixed_bytes,
                                   stock_path.stat().st_size if stock_path else None)
    cache = imp_path.with_name(imp_path.name.replace(".imatrix.gguf", ".sensitivity.json"))
    sens = _sensitivity(cache, sig, weights, imp, ref, options.threads, progress)
    lap("sensitivity")
    choice = allocate(sens.options(weights), budget)
    types = {name: o.type_name for name, o in choice.items()}
    spec = QuantizeSpec("Q8_0", {n: type_id(t) for n, t in types.items()}, means, options.threads)
    run_quantize(src, out, spec, lambda d, t, n: progress("quantize", d, t), cancel)
    lap("quantize")
    held_ref = Reference(src, held, options.threads)
    quality = held_ref.measure(out)
    stock_quality = held_ref.measure(stock_path) if stock_path and options.compare else None
    lap("quality")
    result = QuantizeResult(out, out.stat().st_size, types, quality, held_ref.quality.perplexity, imp_path,
                            stock if options.compare else None,
                            stock_path.stat().st_size if stock_path and options.compare else None,
                            stock_quality, seconds)
    out.with_name(out.name + ".quality.json").write_text(json.dumps(result.to_dict(), indent=1))
    for p in work.iterdir():
        p.unlink()
    work.rmdir()
    return result
