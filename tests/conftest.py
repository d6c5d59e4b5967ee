"""Shared fixtures: one temporary data directory per test session, the embedded models."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.accounts import accounts  # noqa: F401 - a fixture: clients of several machine accounts

# Set before any runtime import reads it: nothing is written outside the temporary dir.
_DATA = tempfile.mkdtemp(prefix="hearth-test-data-")
os.environ["HEARTH_DATA_DIR"] = _DATA
# The Hugging Face cache is a temporary one and the hub a closed loopback port: no test reads
# the user's cache or reaches the real hub (the loopback_hub fixture points both elsewhere).
os.environ["HF_HOME"] = os.path.join(_DATA, "hf-home")
os.environ.pop("HF_HUB_CACHE", None)
os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"
atexit.register(shutil.rmtree, _DATA, ignore_errors=True)
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Test servers keep their model loaded however slow the machine (tests of keep-alive set their own).
os.environ.setdefault("HEARTH_KEEP_ALIVE", "-1")
# Test servers share this data directory: a prompt cache on disk would carry one module's prompts
# into the next one's first requests. The tests of the disk tier turn it on for their own servers.
os.environ.setdefault("HEARTH_CACHE_DISK", "0")


def pytest_configure(config) -> None:
    # Tests that load a model in this process with llama_cpp.Llama (reference numbers) or the raw
    # bindings get the default model parameters Hearth loads with: no extra buffer types where
    # AMX is advertised, whose kernels trap there and would end the whole test run.
    from runtime.backends.amx import keep_extra_buffers_off

    keep_extra_buffers_off()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return Path(_DATA)


def _embedded(model_id: str, data_dir: Path) -> Path:
    from runtime.store.catalog import load_catalog
    from runtime.store.embedded import ensure_embedded

    return ensure_embedded(load_catalog()[model_id], data_dir)


@pytest.fixture(scope="session")
def smollm2_path(data_dir) -> Path:
    return _embedded("smollm2-135m", data_dir)


@pytest.fixture(scope="session")
def gemma_path(data_dir) -> Path:
    return _embedded("gemma-3-270m", data_dir)


@pytest.fixture(scope="session")
def minilm_path(data_dir) -> Path:
    """The embedded embedding model's ``model.onnx`` (its tokenizer and configs beside it)."""
    return _embedded("minilm-l6", data_dir)


@pytest.fixture()
def loopback_hub(tmp_path, monkeypatch):
    """A Hugging Face-compatible hub on 127.0.0.1 (``tests/hub_server.py`` documents its API).

    ``HF_ENDPOINT`` points at it and ``HF_HOME`` at a temporary directory for the test (and
    for child processes the test starts), so nothing reaches the real hub or the real cache.
    """
    from tests.hub_server import LoopbackHub

    hub = LoopbackHub().start()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    yield hub
    hub.stop()
