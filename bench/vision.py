"""Image questions against Hearth and llama-server: time to first token, first turn and the next
turn (the image re-sent, served from the prompt cache), and the projector's encode time.

Both servers load the same files, the same way (the model, ``--mmproj`` beside it, 2 slots), and
get the same OpenAI chat bodies with the image as a data URL. Without ``--model``/``--mmproj`` the
model is the embedded SmolLM2-135M with a generated projector (``tests/media_models.py``, random
weights, a CLIP-like tower of 2 small layers, ``--image-size`` pixels a side: 256 embeddings at
128); give a real pair (e.g. SmolVLM-256M and its mmproj) to measure a real vision tower.

    .venv/bin/python bench/vision.py [--peer /path/to/llama-server] [--model M.gguf --mmproj P.gguf]

Each of ``--reps`` rounds uses a new image (a first turn is never cached) and then asks a
second question about it with the first answer in the history. Prints JSON.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from common import emit, model_path  # noqa: I001 - common puts the repository on sys.path

from agent_session import _ready
from runtime.server.launcher import free_port


def png(seed: int, w: int = 640, h: int = 480) -> bytes:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    im = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def ask(url: str, model: str, messages: list[dict], max_tokens: int) -> dict:
    """TTFT (the first content delta), the answer, prompt and cached tokens, over one stream."""
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    start, first, text, usage = time.perf_counter(), None, [], {}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            doc = json.loads(line[6:])
            for c in doc.get("choices") or []:
                piece = (c.get("delta") or {}).get("content")
                if piece:
                    first = first if first is not None else time.perf_counter() - start
                    text.append(piece)
            if doc.get("usage"):
                usage = doc["usage"]
            if doc.get("timings"):  # llama-server: prompt tokens computed and taken from its cache
                usage["cache_n"] = doc["timings"].get("cache_n")
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or usage.get("cache_n") or 0
    return {"ttft_s": first if first is not None else time.perf_counter() - start, "text": "".join(text),
            "prompt_tokens": usage.get("prompt_tokens"), "cached_tokens": cached}


def session(url: str, model: str, reps: int, max_tokens: int) -> dict:
    firsts, seconds = [], []
    for i in range(reps):
        image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png(100 + i)).decode()}}
        turn = [{"role": "user", "content": [image, {"type": "text", "text": "What is in this picture?"}]}]
        a = ask(url, model, turn, max_tokens)
        b = ask(url, model, turn + [{"role": "assistant", "content": a["text"]},
                                    {"role": "user", "content": "Describe its colours in one sentence."}], max_tokens)
        firsts.append(a)
        seconds.append(b)

    def med(rows: list[dict], key: str) -> float:
        return round(statistics.median(r[key] for r in rows), 3)

    return {"first_turn_ttft_s": med(firsts, "ttft_s"), "second_turn_ttft_s": med(seconds, "ttft_s"),
            "first_turn_prompt_tokens": firsts[0]["prompt_tokens"], "second_turn_prompt_tokens": seconds[0]["prompt_tokens"],
            "second_turn_cached_tokens": seconds[0]["cached_tokens"]}


def encode_ms(model: Path, mmproj: Path, threads: int) -> dict:
    """The projector alone on one image: libmtmd's preprocessing and encode, in this process."""
    from runtime.backends.llama import ContextConfig, LlamaBackend
    from runtime.media import IMAGE, MARKER, Media

    b = LlamaBackend(model, ContextConfig(n_ctx=2048, n_seq_max=1, n_batch=1024, n_threads=threads))
    try:
        p = b.attach_projector(mmproj)
        times, n = [], 0
        for i in range(3):
            t0 = time.perf_counter()
            _, layout = p.prepare(f"{MARKER} hi", [Media(IMAGE, png(200 + i))], True, True, b.n_batch)
            t1 = time.perf_counter()
            layout.spans[0].embeddings()
            times.append((t1 - t0, time.perf_counter() - t1))
            n = layout.spans[0].end - layout.spans[0].start
        return {"image_tokens": n, "prepare_ms": round(1000 * statistics.median(t[0] for t in times), 1),
                "encode_ms": round(1000 * statistics.median(t[1] for t in times), 1)}
    finally:
        b.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", help="a llama-server binary built from the same llama.cpp")
    ap.add_argument("--model", help="the language model's GGUF (default: the embedded SmolLM2-135M)")
    ap.add_argument("--mmproj", help="its projector (default: a generated one, --image-size)")
    ap.add_argument("--image-size", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=4096)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="hearth-vision-"))
    if args.model and args.mmproj:
        model, mmproj = Path(args.model), Path(args.mmproj)
        if model.parent != mmproj.parent:  # Hearth finds the projector beside the model
            shutil.copy(mmproj, model.parent / mmproj.name)
    else:
        from tests.media_models import write_projector

        model = folder / "SmolTiny-VL-Q8_0.gguf"
        os.link(model_path("smollm2-135m"), model) if hasattr(os, "link") else shutil.copy(model_path("smollm2-135m"), model)
        mmproj = write_projector(folder / "mmproj-SmolTiny-VL-f16.gguf", 576, vision="mlp",
                                 image_size=args.image_size)
    threads = os.cpu_count() or 2
    result: dict = {"model": model.name, "mmproj": mmproj.name, "projector": encode_ms(model, mmproj, threads)}
    from runtime.self_command import hearth_argv
    import subprocess

    port = free_port()
    proc = subprocess.Popen([*hearth_argv(), "serve", "--port", str(port), "--model", str(model), "--ctx",
                             str(args.ctx), "--parallel", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _ready(f"http://127.0.0.1:{port}", proc)
        ask(f"http://127.0.0.1:{port}", str(model), [{"role": "user", "content": "Hi"}], 2)  # load the model
        result["hearth"] = session(f"http://127.0.0.1:{port}", str(model), args.reps, args.max_tokens)
    finally:
        proc.terminate()
        proc.wait(30)
    if args.peer:
        port = free_port()
        proc = subprocess.Popen([args.peer, "-m", str(model), "--mmproj", str(mmproj), "--port", str(port),
                                 "-c", str(args.ctx * 2), "-np", "2", "--jinja", "-t", str(threads)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _ready(f"http://127.0.0.1:{port}", proc)
            ask(f"http://127.0.0.1:{port}", "m", [{"role": "user", "content": "Hi"}], 2)
            result["llama_server"] = session(f"http://127.0.0.1:{port}", "m", args.reps, args.max_tokens)
        finally:
            proc.terminate()
            proc.wait(30)
        h, p = result["hearth"], result["llama_server"]
        result["ratio_first_turn"] = round(h["first_turn_ttft_s"] / p["first_turn_ttft_s"], 2)
        result["ratio_second_turn"] = round(h["second_turn_ttft_s"] / p["second_turn_ttft_s"], 2)
    emit(result)


if __name__ == "__main__":
    main()
