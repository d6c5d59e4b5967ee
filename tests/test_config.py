"""``hearth serve``'s options become one config object, built once, with its defaults defined once."""

from __future__ import annotations

import dataclasses

import pytest

from runtime.cli import build_parser
from runtime.config import EngineConfig, ResidencyConfig, SecurityConfig, serve_config


def _config(*argv: str, key: str | None = None, tmp_path=None):
    args = build_parser().parse_args(["serve", *argv])
    return serve_config(args, tmp_path, key)


def test_every_option_lands_in_its_sub_config(tmp_path):
    c = _config("--host", "0.0.0.0", "--port", "9", "--model", "m", "--ctx", "4096", "--parallel", "2",
                "--batch", "256", "--threads", "3", "--kv-type", "q8_0", "--flash-attn", "off",
                "--block-size", "32", "--no-prefix-cache", "--cache-fraction", "0.25", "--cache-ram", "64",
                "--cache-disk", "512", "--draft", "ngram", "--load-timeout", "30", "--max-models", "2",
                "--memory-budget", "1G", "--load-wait", "5", "--keep-alive", "30s", "--cors-origin", "https://a.example",
                "--models-dir", str(tmp_path), "--max-tokens-limit", "99", "--max-client-requests", "3",
                "--max-body-mb", "1", "--ollama-port", "--shutdown-grace", "2", "--max-client-held", "20",
                "--cache-isolation", "client", "--body-min-rate", "8", "--body-budget-mb", "64",
                "--client-body-budget-mb", "16", "--write-timeout", "30", key="k" * 16, tmp_path=tmp_path)
    assert c.engine == EngineConfig(ctx=4096, parallel=2, n_batch=256, threads=3, kv_type="q8_0", flash_attn=False,
                                    block_size=32, prefix_cache=False, cache_fraction=0.25, cache_ram=64,
                                    cache_dir=tmp_path / "prompt-cache", cache_disk=512, draft="ngram",
                                    load_timeout=30.0)
    assert c.residency == ResidencyConfig(max_models=2, memory_budget=1024 ** 3, load_wait=5.0, keep_alive=30.0)
    assert c.security == SecurityConfig(host="0.0.0.0", api_key="k" * 16, cors_origins=("https://a.example",),
                                        models_dirs=(tmp_path.resolve(),), max_tokens_limit=99,
                                        max_client_requests=3, max_body_bytes=1024 * 1024, max_client_held=20,
                                        cache_isolation="client", body_min_rate=8 * 1024,
                                        body_budget_bytes=64 * 2**20, client_body_bytes=16 * 2**20,
                                        write_timeout=30.0)
    assert (c.port, c.model, c.data_dir, c.ollama_port, c.shutdown_grace) == (9, "m", tmp_path, 11434, 2.0)


def test_the_defaults_are_the_configs(tmp_path, monkeypatch):
    monkeypatch.delenv("HEARTH_KEEP_ALIVE", raising=False)
    monkeypatch.delenv("HEARTH_CACHE_DISK", raising=False)
    c = _config(tmp_path=tmp_path)
    assert c.engine == EngineConfig(cache_dir=tmp_path / "prompt-cache") and c.engine.ctx is None  # chosen per model
    assert c.residency == ResidencyConfig()
    assert c.security == SecurityConfig()


def test_the_config_is_handed_down_unchanged(tmp_path):
    c = _config(tmp_path=tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.engine.ctx = 1  # type: ignore[misc]
