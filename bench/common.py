"""Shared pieces of the benchmarks: a temporary data directory, the model, an SSE reader."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

if "HEARTH_DATA_DIR" not in os.environ:  # nothing is written outside a temporary directory
    os.environ["HEARTH_DATA_DIR"] = tempfile.mkdtemp(prefix="hearth-bench-")


def model_path(model_id: str) -> Path:
    from runtime.config import data_dir
    from runtime.store.catalog import load_catalog
    from runtime.store.embedded import ensure_embedded

    return ensure_embedded(load_catalog()[model_id], data_dir())


async def stream_completion(session, url: str, body: dict) -> dict:
    """POST a streaming completion; return token count and the times of first and last token."""
    times: list[float] = []
    text: list[str] = []
    usage = None
    async with session.post(f"{url}/v1/completions", json={**body, "stream": True,
                            "stream_options": {"include_usage": True}}) as r:
        r.raise_for_status()
        async for line in r.content:
            if not line.startswith(b"data: {"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]["completion_tokens"]
            elif chunk["choices"] and chunk["choices"][0]["text"]:
                times.append(time.perf_counter())
                text.append(chunk["choices"][0]["text"])
    return {"tokens": usage, "first": times[0], "last": times[-1], "chunks": len(times), "text": "".join(text)}


def emit(result: dict) -> None:
    print(json.dumps(result, indent=2))
