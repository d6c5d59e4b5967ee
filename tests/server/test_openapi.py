"""/openapi.json describes every route of the live router."""

from __future__ import annotations

from runtime.config import SecurityConfig, ServeConfig
from runtime.server.app import create_app
from runtime.server.openapi import build


def _routes() -> set[tuple[str, str]]:
    app = create_app(ServeConfig(preload=False))
    out = set()
    for route in app.router.routes():
        if route.method in ("HEAD", "OPTIONS"):
            continue
        out.add((route.method, route.resource.canonical))
    return out


def test_every_route_is_described():
    doc = build(max_tokens=64)
    described = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    missing = _routes() - described
    assert not missing, f"routes without an OpenAPI description (add them to runtime/server/openapi.py): {missing}"
    assert not described - _routes(), "described routes that do not exist"


def test_document_is_valid_openapi_and_carries_the_limits():
    import schemathesis

    doc = build(max_tokens=64)
    schema = schemathesis.openapi.from_dict(doc)
    ops = {(op.method.upper(), op.path) for op in (r.ok() for r in schema.get_all_operations())}
    assert ("POST", "/api/chat") in ops and ("GET", "/health") in ops
    props = doc["components"]["schemas"]["ChatCompletionRequest"]["properties"]
    assert props["max_tokens"]["maximum"] == 64
    for op in (o for ops_ in doc["paths"].values() for o in ops_.values()):
        assert "default" in op["responses"], op["summary"]


async def test_served_document(aiohttp_client):
    client = await aiohttp_client(create_app(ServeConfig(preload=False, security=SecurityConfig(max_tokens_limit=99))))
    r = await client.get("/openapi.json")
    assert r.status == 200
    doc = await r.json()
    assert doc["openapi"].startswith("3.") and "/api/pull" in doc["paths"]
    assert doc["components"]["schemas"]["OllamaOptions"]["properties"]["num_predict"]["maximum"] == 99
