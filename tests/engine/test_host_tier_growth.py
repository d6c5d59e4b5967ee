"""The host-memory tier takes memory as it saves entries, not when the engine starts: an
engine with a 2 GiB tier holds no more after its start than one would without a tier, and
the tier's bytes appear only once a finished prompt's cells leave the device. Measured in a
fresh process (anonymous RSS is per process) with the real SmolLM2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20

SCRIPT = r"""
import json, sys
from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.engine.engine import CacheConfig, Engine
from runtime.sampling_params import SamplingParams

def anon():
    for line in open('/proc/self/status'):
        if line.startswith('RssAnon:'):
            return int(line.split()[1]) * 1024

backend = LlamaBackend(sys.argv[1], ContextConfig(n_ctx=2048, n_seq_max=2, n_batch=512))
loaded = anon()
engine = Engine(backend, 2, CacheConfig(16, True, 0.0, host_mib=2048))
started = anon()
tier = engine.kv.host
empty = tier.bytes
prompt = backend.tokenize(" ".join(f"line {i}: the quick brown fox." for i in range(120)))
engine.add_request("a", prompt, SamplingParams(temperature=0, max_tokens=2))
while engine.has_work():
    engine.step()
print(json.dumps({"start": started - loaded, "capacity": tier.capacity_bytes, "empty": empty,
                  "saved": tier.bytes, "after": anon() - started,
                  "tokens": len(prompt)}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_host_tier_grows_on_use(smollm2_path):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(smollm2_path)], capture_output=True, text=True,
                         timeout=600, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["capacity"] == 2048 * MIB
    assert got["empty"] == 0 and got["start"] < 32 * MIB, got  # nothing of the 2 GiB reserved
    assert got["saved"] > 0, got  # the finished prompt's cells went to the tier
    assert got["after"] >= got["saved"] * 0.8, got  # and only then took memory
