"""Over several GPUs the draft model loads whole on the last GPU that holds the target, where
the fit planner counts it, instead of being split again."""

from __future__ import annotations

from runtime.backends.llama import ContextConfig


def test_a_draft_goes_whole_on_the_last_gpu_of_a_split_target():
    from runtime.engine.worker import draft_config

    split = ContextConfig(n_gpu_layers=99, split_mode="layer", tensor_split=[0.5, 0.5, 0.0], main_gpu=0)
    d = draft_config(split)
    assert (d.split_mode, d.main_gpu, d.tensor_split, d.n_gpu_layers) == ("none", 1, None, 99)
    single = ContextConfig(n_gpu_layers=99, split_mode="none", main_gpu=1)
    assert draft_config(single) is single


def test_a_draft_keeps_no_experts_in_ram():
    """A MoE target's experts of the first layers stay in RAM (the plan's ``cpu_moe_layers``);
    the draft is counted whole on the device it runs on."""
    from runtime.engine.worker import draft_config

    target = ContextConfig(n_gpu_layers=99, cpu_moe_layers=18)
    assert draft_config(target).cpu_moe_layers == 0 and target.cpu_moe_layers == 18


def test_the_worker_spec_carries_the_plans_experts_in_ram():
    from runtime.engine.messages import WorkerSpec

    assert WorkerSpec("m", "/m.gguf", cpu_moe_layers=18).cpu_moe_layers == 18
