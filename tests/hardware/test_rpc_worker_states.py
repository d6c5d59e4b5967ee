"""/health's RPC worker states: the planner's fresh answers replace an older one."""

from __future__ import annotations

import socket

from runtime.backends.rpc_endpoint import RpcState
from runtime.hardware import rpc_workers


def test_a_state_the_planner_just_asked_replaces_an_older_ready(monkeypatch):
    with socket.socket() as s:  # a port nothing listens on: a worker that went away
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"127.0.0.1:{port}"
    monkeypatch.setattr(rpc_workers, "_last", {})
    rpc_workers.remember([RpcState(endpoint, "ready", "3.0.0")])  # asked before it went away
    assert rpc_workers.worker_states([endpoint], {})[0]["state"] == "ready"  # cached, not asked again
    rpc_workers.remember([RpcState(endpoint, "down", detail="Connection refused")])  # the planner, before a load
    assert rpc_workers.worker_states([endpoint], {})[0]["state"] == "down"
    monkeypatch.setattr(rpc_workers, "_last", {})
    assert rpc_workers.worker_states([endpoint], {})[0]["state"] == "down"  # asked: nothing answers
    # a worker a loaded model uses is reported from the model's side, never asked
    assert rpc_workers.worker_states([endpoint], {endpoint: ["m"]})[0] == {"endpoint": endpoint, "state": "in_use",
                                                                           "models": ["m"]}
