"""The Server page lists the RPC workers the service's /health reports."""

from __future__ import annotations

from app.ui.server_page import rpc_workers


def test_rpc_workers_are_listed_with_state_and_models():
    health = {"rpc": [{"endpoint": "192.168.1.20:50052", "state": "in_use", "models": ["qwen3-32b"]},
                      {"endpoint": "192.168.1.21:50052", "state": "down", "models": []},
                      {"endpoint": 7, "state": "ready"}]}
    assert rpc_workers(health) == ("192.168.1.20:50052: in use (qwen3-32b)\n"
                                   "192.168.1.21:50052: not answering")
    assert rpc_workers({}) == rpc_workers({"rpc": None}) == "–"
