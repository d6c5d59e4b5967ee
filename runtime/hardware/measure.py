"""Measure what a model really takes: resident memory and decode speed, in a fresh process.

Each measure runs in a ``spawn`` child so nothing else shares its memory: the baseline is the
child's resident set once llama.cpp's libraries are loaded and initialised; then the model
is loaded with ``LlamaBackend`` as Hearth loads it, one token is decoded, and optionally the
context is filled in ``n_batch`` chunks (logits on each chunk's last token, as Hearth asks
them) so that the attention buffers reach their full size. Decode speed is the median of
single-token decodes after that.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import asdict, dataclass


@dataclass(slots=True)
class Measurement:
    path: str
    n_ctx: int  #: the context llama.cpp created (padded)
    kv_type: str
    n_seq: int
    n_batch: int
    filled: int  #: cells in use when the resident set was read
    rss_bytes: int  #: resident set growth over the baseline, model loaded and used
    rss_after_load: int  #: growth right after loading (weights are memory-mapped)
    decode_tokens_per_s: float  #: median of single-token decodes
    decode_best_tokens_per_s: float
    load_s: float
    n_threads: int

    def to_dict(self) -> dict:
        return asdict(self)


class MeasureError(RuntimeError):
    """The measuring process failed (the model could not load, or it crashed)."""


def _fill(backend, start: int, end: int) -> None:
    batch = backend.batch
    pos = start
    while pos < end:
        k = min(backend.n_batch, end - pos)
        batch.clear()
        batch.add([100 + (pos + i) % 1000 for i in range(k)], pos, 0, True)
        backend.decode(batch)
        pos += k


def _decode_times(backend, start: int, count: int) -> list[float]:
    batch = backend.batch
    token = 200
    times = []
    for i in range(count):
        batch.clear()
        batch.add([token], start + i, 0, True)
        t0 = time.perf_counter()
        backend.decode(batch)
        token = int(backend.logits(0).argmax())
        times.append(time.perf_counter() - t0)
    return times


def _run(path: str, n_ctx: int, kv_type: str, n_seq: int, n_batch: int, fill: bool,
         prefill: int | None, decode_tokens: int, n_threads: int) -> dict:
    import psutil

    from runtime.backends import ggml_devices
    from runtime.backends.llama import ContextConfig, LlamaBackend, default_threads
    from runtime.config import SWA_HOLDER_SEQS

    ggml_devices.list_devices()  # loads and initialises llama.cpp: part of the baseline
    proc = psutil.Process()
    base = proc.memory_info().rss
    t0 = time.perf_counter()
    # the sequence ids of a worker with ``n_seq`` running requests (a sliding-window model's
    # cells grow with them): holders beside them
    config = ContextConfig(n_ctx=n_ctx, n_seq_max=n_seq + SWA_HOLDER_SEQS, n_seq_running=n_seq, n_batch=n_batch,
                           kv_type=kv_type, n_threads=n_threads)
    backend = LlamaBackend(path, config)
    load_s = time.perf_counter() - t0
    after_load = proc.memory_info().rss - base
    decoded = min(decode_tokens, max(backend.n_ctx - 2, 1))
    end = backend.n_ctx - decoded - 1 if fill else min(prefill or n_batch, backend.n_ctx - decoded - 1)
    _fill(backend, 0, max(end, 1))
    times = sorted(_decode_times(backend, max(end, 1), decoded))
    rss = proc.memory_info().rss - base
    backend.close()
    return Measurement(
        path=path, n_ctx=backend.n_ctx, kv_type=kv_type, n_seq=n_seq, n_batch=n_batch,
        filled=max(end, 1) + decoded, rss_bytes=rss, rss_after_load=after_load,
        decode_tokens_per_s=1 / times[len(times) // 2], decode_best_tokens_per_s=1 / times[0],
        load_s=load_s, n_threads=n_threads or default_threads(),
    ).to_dict()


def _child(conn, kwargs: dict) -> None:
    try:
        conn.send(("ok", _run(**kwargs)))
    except BaseException as e:  # sent back to the parent, which raises it as MeasureError
        conn.send(("error", f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def measure_model(path: str, n_ctx: int, kv_type: str = "f16", n_seq: int = 4, n_batch: int = 512,
                  fill: bool = False, prefill: int | None = None, decode_tokens: int = 16,
                  n_threads: int = 0, timeout: float = 300.0) -> Measurement:
    """Load ``path`` in a fresh process as Hearth would and measure memory and decode speed.

    ``fill`` fills the whole context first (slow for large contexts: every cell is computed);
    without it ``prefill`` tokens (default: one batch of ``n_batch``) are decoded before
    timing. ``n_threads`` 0 is Hearth's default (the physical cores).
    """
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    kwargs = dict(path=str(path), n_ctx=n_ctx, kv_type=kv_type, n_seq=n_seq, n_batch=n_batch,
                  fill=fill, prefill=prefill, decode_tokens=decode_tokens, n_threads=n_threads)
    proc = ctx.Process(target=_child, args=(child, kwargs), daemon=True)
    proc.start()
    child.close()
    try:
        if not parent.poll(timeout):
            raise MeasureError(f"measuring {path} took more than {timeout:.0f} s: stopped")
        status, payload = parent.recv()
    except EOFError:
        proc.join(5)
        raise MeasureError(f"the measuring process for {path} died (exit code {proc.exitcode})") from None
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        parent.close()
    if status != "ok":
        raise MeasureError(f"measuring {path} failed: {payload}")
    return Measurement(**payload)
