"""Hearth's mixed quantization against llama.cpp's stock mixes of the same size.

The source is the embedded model rewritten as F16 (``llama_model_quantize``; the embedded files
are Q4_1 and Q4_K_M, so the F16 copy is their exact function). For each stock mix the script
runs ``hearth quantize --to MIX``: the budget is the size of llama.cpp's file for that mix,
made with the same importance matrix, and both files are measured on the shipped held-out
text: KL divergence to the source (nats per token), perplexity, and the seconds each step
took. The importance matrix and the sensitivity are measured once per model (the first
row's times include them).

    python bench/quantize.py [--model smollm2-135m] [--mixes Q3_K_M,Q4_K_M,Q5_K_M] [--threads 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from common import emit, model_path

from runtime.backends.quantize import requantize
from runtime.quantize.pipeline import QuantizeOptions, quantize
from runtime.quantize.target import Target


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--mixes", default="Q3_K_M,Q4_K_M,Q5_K_M")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", type=Path, help="folder for the files (default: a temporary one)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hearth-bench-quantize-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        src = work / f"{args.model}.F16.gguf"
        if not src.is_file():
            requantize(model_path(args.model), src, "f16", args.threads)
        rows = []
        for mix in args.mixes.split(","):
            start = time.monotonic()
            r = quantize(src, QuantizeOptions(Target(stock=mix), output=work / f"{args.model}.hearth-{mix}.gguf",
                                              threads=args.threads))
            rows.append({
                "mix": mix,
                "hearth": {"bytes": r.size, "kl": round(r.quality.kl_mean, 5), "kl_p99": round(r.quality.kl_p99, 4),
                           "top1": round(r.quality.top1_agree, 4), "ppl": round(r.quality.perplexity, 3),
                           "types": _count(r.types)},
                "stock": {"bytes": r.stock_size, "kl": round(r.stock_quality.kl_mean, 5),
                          "kl_p99": round(r.stock_quality.kl_p99, 4), "top1": round(r.stock_quality.top1_agree, 4),
                          "ppl": round(r.stock_quality.perplexity, 3)},
                "hearth_lower_kl": r.quality.kl_mean < r.stock_quality.kl_mean,
                "seconds": r.seconds | {"total": round(time.monotonic() - start, 1)},
            })
        emit({"model": args.model, "source": "F16 of the embedded file", "source_ppl": round(r.source_perplexity, 3),
              "heldout_tokens": r.quality.tokens, "rows": rows})


def _count(types: dict[str, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in types.values():
        out[t] = out.get(t, 0) + 1
    return dict(sorted(out.items()))


if __name__ == "__main__":
    main()
