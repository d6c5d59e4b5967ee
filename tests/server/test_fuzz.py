"""Schemathesis against /openapi.json on a live server with the default model.

Bounded: a few examples per operation, positive and negative, and a small max_tokens limit
on the server (the document carries it, so generated requests stay short). Every response
must be documented: no 5xx, a documented status and content type, and errors in the
documented format (OpenAI's object, Ollama's string under /api/).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.conftest import live_server

EXAMPLES = 12


@pytest.fixture(scope="module")
def server(smollm2_path):
    s = live_server("--parallel", "2", "--ctx", "2048", "--max-tokens-limit", "4", "--max-client-requests", "64")
    yield s
    s.stop()


def test_schemathesis_finds_no_undocumented_response(server):
    import schemathesis
    from schemathesis.checks import not_a_server_error
    from schemathesis.generation import GenerationMode
    from schemathesis.specs.openapi.checks import (
        content_type_conformance, response_schema_conformance, status_code_conformance,
    )

    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    operations = [r.ok() for r in schema.get_all_operations()]
    assert len(operations) >= 15
    strategies = [op.as_strategy(generation_mode=mode) for op in operations
                  for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)]
    seen: dict[int, int] = {}

    @settings(max_examples=EXAMPLES * len(strategies), deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def run(data):
        case = data.draw(st.sampled_from(strategies).flatmap(lambda s: s))
        response = case.call_and_validate(base_url=server.url, checks=checks, timeout=60)
        seen[response.status_code] = seen.get(response.status_code, 0) + 1

    run()
    assert server.proc.poll() is None and server.health()["engine"]["state"] in ("running", "idle")
    print("statuses", seen)
    assert any(s < 300 for s in seen) and any(400 <= s < 500 for s in seen), seen
