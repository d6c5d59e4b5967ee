"""The service loads a model with its fit plan's multi-GPU placement: a plan made for a recorded
2 x 24 GB machine reaches the worker's spec (split mode, tensor split, main GPU), and the worker
loads with it and serves (a build without GPUs places every layer on the CPU)."""

from __future__ import annotations

from runtime.config import EngineConfig, ServeConfig
from runtime.hardware.fit import plan_fit
from runtime.hardware.shape import shape_from_gguf
from runtime.sampling_params import SamplingParams
from runtime.server.models.model_manager import ModelManager
from tests.hardware import recorded as rec

GIB = 1 << 30


async def test_the_plans_split_reaches_the_worker(smollm2_path, data_dir):
    plan = plan_fit(shape_from_gguf(smollm2_path), rec.machine(rec.TWO_4090, 64 * GIB, 60 * GIB), ctx=1024, n_seq=1)
    assert plan.split_mode == "layer" and plan.tensor_split == [0.5, 0.5] and plan.gpu_layers == 31
    manager = ModelManager(ServeConfig(data_dir=data_dir, preload=False, engine=EngineConfig(parallel=1, ctx=1024)))
    model = manager.resolve("smollm2-135m")
    engine = await manager._load(model, plan, 1024)
    try:
        assert (engine.spec.split_mode, engine.spec.tensor_split, engine.spec.main_gpu) == ("layer", [0.5, 0.5], 0)
        assert engine.spec.n_gpu_layers == 31
        [handle] = await engine.submit(SamplingParams(temperature=0.0, max_tokens=4), prompt="Hello")
        outs = [o async for o in handle]
        assert outs[-1].finish_reason in ("length", "stop")
    finally:
        await engine.stop()
