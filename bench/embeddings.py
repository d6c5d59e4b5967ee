"""Embeddings per second through Hearth's API vs ONNX Runtime called directly, and chat decode
speed beside an embedding load.

Same model (minilm-l6: all-MiniLM-L6-v2, int8 ONNX), same texts, same intra-op threads (idle threads not spinning on either side, unless
``--spin`` lets the reference's spin as ONNX Runtime does by default), measured
in one run, alternating, median of the repeats. The reference tokenizes with ``tokenizers``,
pads the batch, runs the session and mean-pools and normalises with numpy, as a program that
embeds in-process would. Hearth's side is sequential ``POST /v1/embeddings`` requests of the
batch size over one keep-alive connection (JSON floats back), each followed by one reference
call on the same texts. The reference runs a request's texts as one padded batch; Hearth's
worker sorts them by length and runs batches of 16 (less padding), so a second reference does
the same (``sorted_reference``): the ratio to it is the cost of the API and the worker alone.
Targets: hearth / reference >= 1.0
at batch 64; API overhead (hearth's latency - the reference's) under 2 ms per request at batch 1.
Then chat decode tokens/s of smollm2-135m alone, while a client embeds batches of 8 back to
back, and while it embeds one batch of 8 every 100 ms (the ratios are what a chat user feels
while an indexer runs).

    python bench/embeddings.py [--threads 2] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time

import numpy as np
from common import emit, model_path

WORDS = ("the quick brown fox jumps over a lazy dog while the river keeps running past old stone bridges "
         "and people talk about weather markets music football science gardens travel and food").split()


def corpus(n: int = 256, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(8, 40)))) + "." for _ in range(n)]


class Reference:
    def __init__(self, folder, threads: int, spin: bool = False) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        if not spin:  # as Hearth's worker runs it (threads sleep when idle)
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.sess = ort.InferenceSession(str(folder / "model.onnx"), opts, providers=["CPUExecutionProvider"])
        self.tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tok.no_padding()
        self.tok.enable_truncation(256)

    def embed_sorted(self, texts: list[str], batch: int = 16) -> np.ndarray:
        """As Hearth's worker runs a request: sorted by length, in batches of ``batch``."""
        order = sorted(range(len(texts)), key=lambda i: len(self.tok.encode(texts[i]).ids))
        out = np.zeros((len(texts), 384), np.float32)
        for k in range(0, len(order), batch):
            idx = order[k:k + batch]
            out[idx] = self.embed([texts[i] for i in idx])
        return out

    def embed(self, texts: list[str]) -> np.ndarray:
        encs = self.tok.encode_batch(texts)
        width = max(len(e.ids) for e in encs)
        ids = np.zeros((len(encs), width), np.int64)
        mask = np.zeros_like(ids)
        for i, e in enumerate(encs):
            ids[i, :len(e.ids)], mask[i, :len(e.ids)] = e.ids, 1
        (h,) = self.sess.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})
        m = mask[:, :, None].astype(np.float32)
        v = (h * m).sum(1) / m.sum(1)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def batches(texts: list[str], batch: int, total: int) -> list[list[str]]:
    return [[texts[(i + k) % len(texts)] for k in range(batch)] for i in range(0, total, batch)]


def rates(client, url: str, ref: Reference, texts: list[str], batch: int, total: int) -> tuple[float, ...]:
    """(hearth per s, reference per s, sorted reference per s, hearth s per request, reference s
    per call): one Hearth request and one call of each reference alternately, so that load
    from other programs falls on all three."""
    work = batches(texts, batch, total)
    th = tr = ts = 0.0
    for b in work:
        t = time.perf_counter()
        client.post(f"{url}/v1/embeddings", json={"model": "minilm-l6", "input": b}).raise_for_status()
        t1 = time.perf_counter()
        ref.embed(b)
        t2 = time.perf_counter()
        ref.embed_sorted(b)
        t3 = time.perf_counter()
        th, tr, ts = th + (t1 - t), tr + (t2 - t1), ts + (t3 - t2)
    n = len(work) * batch
    return n / th, n / tr, n / ts, th / len(work), tr / len(work)


async def chat_rate(url: str, tokens: int) -> float:
    import aiohttp
    from common import stream_completion

    async with aiohttp.ClientSession() as s:
        r = await stream_completion(s, url, {"model": "smollm2-135m", "prompt": "Once upon a time, in a small village",
                                             "max_tokens": tokens, "temperature": 0, "ignore_eos": True})
    return (r["tokens"] - 1) / (r["last"] - r["first"])


def chat_beside_embeddings(client, url: str, texts: list[str], tokens: int, pause: float) -> tuple[float, int]:
    """Chat decode tok/s while another client embeds batches of 8, ``pause`` seconds apart."""
    stop, done = threading.Event(), [0]

    def load():
        import httpx

        with httpx.Client(timeout=120) as c:
            while not stop.is_set():
                c.post(f"{url}/v1/embeddings", json={"model": "minilm-l6", "input": texts[:8]}).raise_for_status()
                done[0] += 1
                stop.wait(pause)

    t = threading.Thread(target=load)
    t.start()
    try:
        time.sleep(0.2)
        return asyncio.run(chat_rate(url, tokens)), done[0]
    finally:
        stop.set()
        t.join()


def main() -> None:
    import httpx

    from runtime.server.launcher import ServiceProcess

    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--texts", type=int, default=256, help="texts embedded per measurement and batch size")
    ap.add_argument("--chat-tokens", type=int, default=128)
    ap.add_argument("--spin", action="store_true", help="let the reference's idle threads spin (ONNX Runtime's "
                    "default; Hearth's worker turns it off so that a chat model beside it keeps its cores)")
    args = ap.parse_args()
    folder = model_path("minilm-l6").parent
    model_path("smollm2-135m")
    texts = corpus()
    ref = Reference(folder, args.threads, spin=args.spin)
    env = {**os.environ, "HEARTH_EMBED_THREADS": str(args.threads)}
    server = ServiceProcess("--parallel", "2", "--ctx", "2048", env=env).wait_ready()
    out: dict = {"model": "minilm-l6 (all-MiniLM-L6-v2 int8 ONNX)", "threads": args.threads, "repeats": args.repeats,
                 "reference_spins": args.spin,
                 "texts_per_measurement": args.texts, "batches": {}}
    try:
        with httpx.Client(timeout=120) as client:
            rates(client, server.url, ref, texts, 8, 64)  # loads the worker, warms both
            for batch in (1, 8, 64):
                total = max(batch, args.texts if batch > 1 else args.texts // 4)
                h, r, rs, hl, rl = [], [], [], [], []
                for _ in range(args.repeats):
                    a, b, c, al, bl = rates(client, server.url, ref, texts, batch, total)
                    h.append(a), hl.append(al), r.append(b), rs.append(c), rl.append(bl)
                hm, rm = statistics.median(h), statistics.median(r)
                out["batches"][str(batch)] = {
                    "hearth_per_s": round(hm, 1), "reference_per_s": round(rm, 1), "ratio": round(hm / rm, 3),
                    "sorted_reference_per_s": round(statistics.median(rs), 1),
                    "ratio_to_sorted": round(hm / statistics.median(rs), 3),
                    "hearth_ms_per_request": round(statistics.median(hl) * 1e3, 3),
                    "reference_ms_per_call": round(statistics.median(rl) * 1e3, 3),
                    "overhead_ms_per_request": round((statistics.median(hl) - statistics.median(rl)) * 1e3, 3)}
            alone = [asyncio.run(chat_rate(server.url, args.chat_tokens)) for _ in range(2)]
            beside = [chat_beside_embeddings(client, server.url, texts, args.chat_tokens, 0.0) for _ in range(2)]
            paced = [chat_beside_embeddings(client, server.url, texts, args.chat_tokens, 0.1) for _ in range(2)]
            stats = server.stats()
        b64, b1 = out["batches"]["64"], out["batches"]["1"]
        out["chat"] = {"alone_tok_s": round(max(alone), 1), "beside_embeddings_tok_s": round(max(b for b, _ in beside), 1),
                       "ratio": round(max(b for b, _ in beside) / max(alone), 3),
                       "embedding_requests_meanwhile": sum(n for _, n in beside),
                       "beside_paced_embeddings_tok_s": round(max(b for b, _ in paced), 1),
                       "paced_ratio": round(max(b for b, _ in paced) / max(alone), 3),
                       "loads": stats["loads"], "unloads": stats["unloads"]}
        out["targets"] = {"batch64_ratio_ge_1": b64["ratio"] >= 1.0, "batch1_overhead_lt_2ms": b1["overhead_ms_per_request"] < 2.0}
    finally:
        server.stop()
    emit(out)


if __name__ == "__main__":
    main()
