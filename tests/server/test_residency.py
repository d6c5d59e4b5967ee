"""The residency budget: sizes from the command line, what fits, a plan's memory per device."""

from __future__ import annotations

import subprocess
import sys

import pytest

from runtime.server.models.residency import Budget, Need, parse_size

GIB = 1 << 30


@pytest.mark.parametrize("text, expected", [("8G", 8 * GIB), ("6.5GiB", int(6.5 * GIB)), ("512M", 512 << 20),
                                            ("512mb", 512 << 20), ("1073741824", GIB), ("2 k", 2048)])
def test_sizes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "lots", "-1G", "0", "8X"])
def test_bad_sizes_are_refused(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_budget_counts_ram_each_gpu_and_models():
    b = Budget(ram=4 * GIB, gpus={"CUDA0": 2 * GIB}, max_models=2)
    assert b.fits(Need(3 * GIB, {"CUDA0": GIB}), 2)
    assert not b.fits(Need(5 * GIB), 1)
    assert not b.fits(Need(GIB, {"CUDA0": 3 * GIB}), 1)
    assert not b.fits(Need(GIB), 3)
    assert Need(GIB, {"CUDA0": GIB}).plus(Need(GIB, {"CUDA0": 2, "CUDA1": 5})).to_dict() == {
        "ram_bytes": 2 * GIB, "gpu_bytes": {"CUDA0": GIB + 2, "CUDA1": 5}, "total_bytes": 3 * GIB + 7}


def test_a_split_plan_gives_its_memory_per_device_and_the_default_budget_keeps_reserves(smollm2_path):
    from runtime.hardware.fit import GPU_RESERVE_BYTES, RAM_RESERVE_BYTES, plan_fit
    from runtime.hardware.shape import shape_from_gguf
    from runtime.server.models.residency import default_budget
    from tests.hardware.recorded import cuda, machine

    hw = machine([cuda(0, "NVIDIA GeForce RTX 3060", 12288, 750)], 16 * GIB, 8 * GIB)
    plan = plan_fit(shape_from_gguf(smollm2_path), hw, ctx=2048, n_seq=2)
    assert plan.verdict == "partial"  # 238 MiB of the GPU above its reserve: some layers there
    need = Need.of(plan)
    assert need.ram == plan.ram_bytes > 0 and set(need.gpus) == {"CUDA0"}
    assert need.gpus["CUDA0"] == plan.gpu_bytes > 0
    budget = default_budget(hw, None, None)
    assert 0 < budget.ram < 8 * GIB - RAM_RESERVE_BYTES and budget.source == "planner"
    assert budget.gpus == {"CUDA0": int(((750 << 20) - GPU_RESERVE_BYTES) / 1.1)}
    assert budget.fits(need, 1)
    assert default_budget(hw, 3, GIB).ram == GIB and default_budget(hw, 3, GIB).max_models == 3
    assert Need.of(None) == Need()


@pytest.mark.parametrize("args, needle", [(["--memory-budget", "lots"], "--memory-budget"),
                                          (["--max-models", "0"], "--max-models")])
def test_serve_refuses_bad_residency_options(args, needle):
    r = subprocess.run([sys.executable, "-m", "runtime.cli", "serve", *args], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and needle in r.stderr
