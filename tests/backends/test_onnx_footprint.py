"""The embedding worker's memory: the session is sized for one small model. Measured in a fresh
process (RSS is per process): the session built, then one batch of 32 inputs at the model's
maximum length. With ONNX Runtime's default arena that batch left 650 MiB held for good and
the session itself took 162 MiB for the 22 MiB embedded MiniLM; without the arena and with
the optimizer's freed heap handed back, the batch leaves almost nothing and the session
takes about 108 MiB."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import json, sys
from pathlib import Path

def anon():
    for line in open('/proc/self/status'):
        if line.startswith('RssAnon:'):
            return int(line.split()[1]) * 1024

from runtime.backends.onnx_embedder import OnnxEmbedder
from runtime.store.onnx_model import read_onnx_model

info = read_onnx_model(Path(sys.argv[1]))
before = anon()
e = OnnxEmbedder(info, threads=2, batch_size=32)
session = anon()
e.embed(e.encode(["word " * 400] * 32, truncate=True))
after = anon()
print(json.dumps({"session": session - before, "batch": after - session}))
"""

MIB = 1 << 20


def test_a_long_batch_leaves_no_arena_and_the_session_stays_small(minilm_path):
    if not sys.platform.startswith("linux"):
        import pytest

        pytest.skip("reads /proc")
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(minilm_path)], capture_output=True, text=True,
                         timeout=600, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    file_bytes = minilm_path.stat().st_size
    assert got["batch"] < 64 * MIB, got  # 650 MiB with the arena
    assert got["session"] < file_bytes + 100 * MIB, got  # 162 MiB before the heap was handed back
