"""A model's shape from the catalog's architecture numbers, for a model that is not downloaded.

The file's bytes (the catalog's size, or parameters x the quantization's bits per weight) are
split between layers, embeddings and output in proportion to their parameter counts, the
quantization taken as uniform. What the header of the downloaded file says replaces all of it
(``runtime.hardware.shape.shape_from_header``).

What the numbers can describe, each from the model's published ``config.json``:

- attention: ``heads`` x ``head_dim`` queries, ``kv_heads`` keys and values; multi-head latent
  attention (DeepSeek-V2, GLM-4.7-Flash) with ``kv_lora_rank`` and ``rope_head_dim``, whose cache
  llama.cpp holds as one head of ``kv_lora_rank + rope_head_dim`` for K and ``kv_lora_rank`` for V;
- sliding-window attention (``sliding_window``, ``swa_pattern``);
- recurrent layers (Mamba, RWKV, short convolutions, Gated DeltaNet): ``state_bytes`` of one
  sequence in all of them, and ``attention_layers``, the layers with a KV cache;
- mixture of experts: ``experts`` routed per MoE layer of which ``experts_used`` per token,
  ``shared_experts``, ``expert_ff`` (one expert's width), ``moe_layers`` (the MoE layers, counted
  last; by default every layer) and ``expert_gated`` (false: an expert has up and down matrices
  only, as Nemotron-H's squared ReLU);
- per-layer token embeddings (Gemma 3n and 4's PLE): ``per_layer_input`` values a token looks
  up for each layer, kept with the token embeddings (read a row per token, not whole).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from runtime.hardware.experts import Experts, derive_ff, expert_params
from runtime.hardware.shape import ModelShape, ModelShapeError, swa_layers

if TYPE_CHECKING:
    from runtime.store.catalog import CatalogEntry


def shape_from_numbers(
    name: str, architecture: str, file_bytes: int, n_layer: int, n_head: int, n_head_kv: int,
    head_dim: int, n_embd: int, n_vocab: int, ctx_train: int, *, n_ff: int | None = None,
    n_params: int | None = None, sliding_window: int = 0, swa_pattern: int | list | None = None,
    tied_output: bool = False, state_bytes: int = 0, attention_layers: int | None = None,
    n_expert: int = 0, n_expert_used: int = 0, n_expert_shared: int = 0, n_ff_expert: int | None = None,
    moe_layers: int | None = None, expert_gated: bool = True, kv_lora_rank: int = 0, rope_head_dim: int = 0,
    per_layer_input: int = 0,
) -> ModelShape:
    """A shape from catalog numbers (see the module docstring).

    ``n_ff`` may be derived from ``n_params``; without either it defaults to 4 x n_embd, which
    only moves bytes between the layers and the embeddings, never changes the total. A MoE
    model's expert width is ``n_ff_expert``, else derived from ``n_params``, else ``n_ff /
    n_expert_used`` (llama.cpp's fallback); its dense layers (``n_layer - moe_layers``) have a
    feed-forward network of ``n_ff`` only when ``n_ff`` is given. The recurrent layers are
    counted first and the MoE layers last (their order only matters for a GPU split).
    """
    mla = kv_lora_rank > 0
    attn = 2 * n_embd * n_head * head_dim + (
        n_embd * (kv_lora_rank + rope_head_dim) if mla else 2 * n_embd * n_head_kv * head_dim)
    embed = n_vocab * n_embd
    out = 0 if tied_output else embed
    per_layer_embed = n_vocab * n_layer * per_layer_input
    matrices = 3 if expert_gated else 2
    n_moe = min(moe_layers or n_layer, n_layer) if n_expert else 0
    routed = 0
    ff_exp = 0
    if n_expert:
        dense = attn + (matrices * n_embd * n_ff if n_ff else 0)
        spare = n_params - embed - out - per_layer_embed - (n_layer - n_moe) * dense if n_params else 0
        ff_exp = n_ff_expert or (derive_ff(spare / n_moe, attn, n_embd, n_expert, n_expert_shared, matrices)
                                 if spare > 0 else (n_ff or 4 * n_embd) // max(n_expert_used, 1))
        routed, rest = expert_params(n_embd, n_expert, n_expert_shared, ff_exp, matrices)
        layer_params = [dense] * (n_layer - n_moe) + [attn + routed + rest] * n_moe
        n_ff = n_ff or ff_exp * max(n_expert_used, 1)
    else:
        per_layer = (n_params - embed - out - per_layer_embed) / n_layer if n_params else None
        if n_ff is None:
            n_ff = max(int((per_layer - attn) / (3 * n_embd)), 1) if per_layer else 4 * n_embd
        layer_params = [attn + 3 * n_embd * n_ff] * n_layer
    total = sum(layer_params) + embed + per_layer_embed + out
    per_param = file_bytes / total
    experts = Experts(n_expert, n_expert_used, n_expert_shared,
                      tuple(int(routed * per_param) if il >= n_layer - n_moe else 0 for il in range(n_layer)),
                      routed * n_moe, ff_exp) if n_expert else None
    swa, assumed = swa_layers(n_layer, sliding_window, swa_pattern, architecture)
    n_attn = n_layer if attention_layers is None or not state_bytes else attention_layers
    n_rec = n_layer - n_attn
    kv_heads = (0,) * n_rec + (1 if mla else n_head_kv,) * n_attn
    states = (state_bytes // n_rec,) * n_rec + (0,) * n_attn if n_rec else ()
    return ModelShape(
        name=name, architecture=architecture, n_layer=n_layer, n_head=n_head,
        n_head_kv=kv_heads, state_bytes=states, head_dim_k=kv_lora_rank + rope_head_dim if mla else head_dim,
        head_dim_v=kv_lora_rank if mla else head_dim, n_embd=n_embd,
        n_ff=n_ff, n_vocab=n_vocab, ctx_train=ctx_train, sliding_window=sliding_window,
        swa_layers=swa, layer_bytes=tuple(int(p * per_param) for p in layer_params),
        input_bytes=int((embed + per_layer_embed) * per_param), output_bytes=int(out * per_param),
        tied_output=tied_output, n_params=n_params or total, file_bytes=file_bytes,
        source="catalog", swa_assumed=assumed, experts=experts,
    )


#: catalog "shape" keys -> shape_from_numbers arguments
CATALOG_KEYS = {
    "file_bytes": "file_bytes", "layers": "n_layer", "heads": "n_head", "kv_heads": "n_head_kv",
    "head_dim": "head_dim", "embedding": "n_embd", "vocab": "n_vocab", "ff": "n_ff",
    "params": "n_params", "sliding_window": "sliding_window", "swa_pattern": "swa_pattern",
    "tied_embeddings": "tied_output", "state_bytes": "state_bytes",
    "attention_layers": "attention_layers", "experts": "n_expert", "experts_used": "n_expert_used",
    "shared_experts": "n_expert_shared", "expert_ff": "n_ff_expert", "moe_layers": "moe_layers",
    "expert_gated": "expert_gated", "kv_lora_rank": "kv_lora_rank", "rope_head_dim": "rope_head_dim",
    "per_layer_input": "per_layer_input",
}
_CATALOG_REQUIRED = ("file_bytes", "layers", "heads", "kv_heads", "head_dim", "embedding", "vocab")


def catalog_numbers(entry: CatalogEntry) -> dict:
    """``shape_from_numbers`` arguments from a catalog entry's ``"shape"`` object (keys:
    ``CATALOG_KEYS``), its trained context and its family as the architecture."""
    spec: dict = entry.raw.get("shape") or {}
    missing = [k for k in _CATALOG_REQUIRED if not isinstance(spec.get(k), int)]
    if missing:
        raise ModelShapeError(
            f"catalog model {entry.id} has no {', '.join(missing)} in its \"shape\": it cannot be "
            "sized before download; download it and size the file instead"
        )
    args = {CATALOG_KEYS[k]: v for k, v in spec.items() if k in CATALOG_KEYS}
    if "experts" in spec and isinstance(entry.raw.get("params"), int):  # sizes one expert
        args.setdefault("n_params", entry.raw["params"])
    if isinstance(entry.raw.get("sliding_window"), int):  # the catalog's top-level key
        args.setdefault("sliding_window", entry.raw["sliding_window"])
    return {"name": entry.name, "architecture": entry.family, "ctx_train": entry.context_length, **args}


def shape_from_catalog(entry: CatalogEntry) -> ModelShape:
    """The shape of a catalog model from its ``"shape"`` object (which must carry ``file_bytes``)."""
    return shape_from_numbers(**catalog_numbers(entry))
