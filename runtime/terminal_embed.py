"""``hearth embed MODEL TEXT...``: a quick check of an embedding model from the terminal.

One text prints its vector (abridged; ``--full`` prints it whole, as JSON); two or more print
their cosine similarities. Like ``hearth run`` it uses the service running on the port if
there is one, and otherwise starts an in-process service on a free loopback port.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from runtime.service_session import service_session

if TYPE_CHECKING:  # numpy loads when the command runs, not with every `hearth` command
    import numpy as np


def abridged(v: np.ndarray, edge: int = 4) -> str:
    if len(v) <= 2 * edge:
        return "[" + ", ".join(f"{x:.4f}" for x in v) + "]"
    return ("[" + ", ".join(f"{x:.4f}" for x in v[:edge]) + ", ..., "
            + ", ".join(f"{x:.4f}" for x in v[-edge:]) + "]")


def similarity_table(texts: list[str], vectors: np.ndarray, width: int = 28) -> str:
    import numpy as np

    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    sims = unit @ unit.T
    label = [t if len(t) <= width else t[: width - 1] + "…" for t in texts]
    lines = ["cosine similarity"]
    for i, a in enumerate(label):
        row = "  ".join(f"{sims[i, j]:6.3f}" for j in range(len(texts)))
        lines.append(f"[{i}] {a:<{width}}  {row}")
    return "\n".join(lines)


async def _embed(session, base: str, model: str, texts: list[str], headers: dict) -> dict:
    async with session.post(f"{base}/v1/embeddings", json={"model": model, "input": texts}, headers=headers) as r:
        body = await r.json(content_type=None)
        if r.status != 200:
            raise RuntimeError(body.get("error", {}).get("message", f"HTTP {r.status}"))
        return body


async def run_embed(args, start_site) -> int:
    import numpy as np

    async with service_session(args.port, args.model, start_site) as (session, base, headers):
        try:
            body = await _embed(session, base, args.model, args.texts, headers)
        except RuntimeError as e:
            print(f"hearth: {e}", file=sys.stderr)
            return 1
    vectors = np.array([d["embedding"] for d in sorted(body["data"], key=lambda d: d["index"])], dtype=np.float32)
    if args.full:
        print(json.dumps(vectors.tolist()))
        return 0
    print(f"{body['model']}: {vectors.shape[1]} dimensions, {body['usage']['prompt_tokens']} tokens")
    for i, v in enumerate(vectors):
        print(f"[{i}] norm {np.linalg.norm(v):.4f} {abridged(v)}")
    if len(args.texts) >= 2:
        print(similarity_table(args.texts, vectors))
    return 0


def add_parser(sub) -> None:
    p = sub.add_parser("embed", help="embed texts with an embedding model: a vector, or cosine similarities")
    p.add_argument("model", help="an embedding model, e.g. minilm-l6")
    p.add_argument("texts", nargs="+", metavar="TEXT")
    p.add_argument("--port", type=int, default=4327, help="use the service on this port if one runs")
    p.add_argument("--full", action="store_true", help="print the whole vectors as JSON")
