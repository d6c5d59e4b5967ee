"""The fit planner counts a model's multimodal projector: the ``mmproj`` file beside a local model,
or the one a catalog entry names, by its file size plus a fixed margin for encoding one image,
on the device the worker loads it on (the GPU when the model has layers there, else RAM)."""

from __future__ import annotations

from runtime.hardware.fit import plan_fit
from runtime.hardware.memory import PROJECTOR_COMPUTE_BYTES
from runtime.hardware.model_shape import catalog_shape, shape_of_file
from runtime.hardware.report import format_fit_report
from runtime.store.catalog import CatalogEntry, load_catalog
from tests.hardware import recorded as rec
from tests.media_models import write_projector
from tests.spec.tiny_models import write_tiny

GIB = 1 << 30
CPU_ONLY = rec.machine([], 32 * GIB, 28 * GIB)
ONE_4090 = rec.machine([rec.RTX_4090], 32 * GIB, 28 * GIB)


def test_a_projector_beside_a_local_model_grows_the_plan_by_its_size(tmp_path):
    model = write_tiny(tmp_path / "Tiny-Q8_0.gguf", seed=1)
    text_only = shape_of_file(model)
    assert text_only.projector_bytes is None
    without = plan_fit(text_only, CPU_ONLY, ctx=1024)
    assert without.projector_bytes == 0 and not any("projector" in n for n in without.notes)

    projector = write_projector(tmp_path / "mmproj-Tiny-f16.gguf", 64, vision="mlp")
    size = projector.stat().st_size
    shape = shape_of_file(model)
    assert shape.projector_bytes == size and shape.to_dict()["projector_bytes"] == size
    plan = plan_fit(shape, CPU_ONLY, ctx=1024)
    assert plan.total_bytes - without.total_bytes == size + PROJECTOR_COMPUTE_BYTES == plan.projector_bytes
    assert plan.ram_bytes - without.ram_bytes == plan.projector_bytes  # on the CPU: no GPU layers
    assert plan.weights_bytes == without.weights_bytes  # the model's own weights (and speed) are unchanged
    assert plan.predicted_tokens_per_s == without.predicted_tokens_per_s
    assert plan.devices[0].to_dict()["projector_bytes"] == plan.projector_bytes
    assert any("multimodal projector" in n and "on CPU" in n for n in plan.notes)
    assert "projector 6" in format_fit_report(plan)  # 64 MiB and some: the memory line names it


def test_with_gpu_layers_the_projector_is_planned_on_the_gpu(tmp_path):
    model = write_tiny(tmp_path / "Tiny-Q8_0.gguf", seed=1)
    without = plan_fit(shape_of_file(model), ONE_4090, ctx=1024)
    write_projector(tmp_path / "mmproj-Tiny-f16.gguf", 64, vision="mlp")
    plan = plan_fit(shape_of_file(model), ONE_4090, ctx=1024)
    assert plan.verdict == without.verdict == "gpu" and plan.gpu_layers == without.gpu_layers
    assert plan.gpu_bytes - without.gpu_bytes == plan.projector_bytes > PROJECTOR_COMPUTE_BYTES
    assert plan.ram_bytes == without.ram_bytes
    gpu = plan.devices[1]
    assert gpu.projector == plan.projector_bytes and plan.devices[0].projector == 0
    assert any("multimodal projector" in n and f"on {gpu.name}" in n for n in plan.notes)


def test_a_catalog_model_is_planned_with_the_projector_the_catalog_names():
    entry = load_catalog()["gemma-3-4b-vision"]
    shape = catalog_shape(entry)
    assert shape is not None and shape.projector_bytes == entry.mmproj[1] == 851251104
    text = CatalogEntry(entry.id, entry.name, entry.family, entry.license, entry.context_length,
                        {k: v for k, v in entry.raw.items() if k not in ("mmproj", "modalities")})
    assert catalog_shape(text).projector_bytes is None
    grown = plan_fit(shape, CPU_ONLY, ctx=4096).total_bytes - plan_fit(catalog_shape(text), CPU_ONLY, ctx=4096).total_bytes
    assert grown == 851251104 + PROJECTOR_COMPUTE_BYTES


def test_a_catalog_projector_of_unknown_size_counts_the_margin_and_says_so():
    entry = load_catalog()["qwen2.5-omni-3b"]
    assert entry.mmproj[1] is None
    plan = plan_fit(catalog_shape(entry), CPU_ONLY, ctx=4096)
    assert plan.projector_bytes == PROJECTOR_COMPUTE_BYTES
    assert any("size is not known yet" in n for n in plan.notes)
