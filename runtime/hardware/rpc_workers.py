"""The RPC workers' state for ``/health``, without disturbing the ones a model is using.

An ``rpc-server`` serves one client at a time and keeps a queue of one connection (listen
backlog 1): a handshake sent while a model's worker holds it would wait, and every such
attempt would sit in that queue. So a worker that a loaded model uses is reported from the
model's side (``in_use``, with the models), and the others are asked at most every
``MAX_AGE_S`` seconds, with a short timeout.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from runtime.backends.rpc_endpoint import RpcState, hello, parse_endpoint

MAX_AGE_S = 10.0
TIMEOUT_S = 1.0
_last: dict[str, tuple[float, RpcState]] = {}


def remember(states: Sequence[RpcState]) -> None:
    """States just asked elsewhere (the planner asks every worker before a load): /health shows
    them rather than an older answer, such as "ready" from before a worker went away."""
    now = time.monotonic()
    for s in states:
        _last[s.endpoint] = (now, s)


def worker_states(endpoints: Sequence[str], users: Mapping[str, list[str]]) -> list[dict]:
    """One entry per endpoint: ``state`` ready | busy | down | incompatible | in_use, and for
    ``in_use`` the ids of the loaded models whose layers it holds (``users``: endpoint -> ids)."""
    now = time.monotonic()
    out = []
    for endpoint in endpoints:
        models = list(users.get(endpoint, ()))
        if models:
            out.append({"endpoint": endpoint, "state": "in_use", "models": models})
            continue
        where = parse_endpoint(endpoint)
        seen = _last.get(str(where))  # keyed as the states are named (``remember``)
        if seen is None or now - seen[0] > MAX_AGE_S:
            seen = (now, hello(where, TIMEOUT_S))
            _last[str(where)] = seen
        out.append({**seen[1].to_dict(), "models": []})
    return out
