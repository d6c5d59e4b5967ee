"""``hearth quantize`` end to end on a tiny generated model."""

from __future__ import annotations

import json
import threading

import pytest

from runtime.backends.imatrix import tokenize_text
from runtime.backends.quantize import QuantizeSpec, quantize_model
from runtime.quantize import imatrix_file
from runtime.quantize.calibration import CALIBRATION, HELDOUT
from runtime.quantize.job import QuantizeCancelled, run_quantize
from runtime.quantize.pipeline import QuantizeOptions, quantize
from runtime.quantize.quality import Reference
from runtime.quantize.target import Target
from runtime.quantize.types import type_id
from runtime.quantize.weights import SourceWeights
from tests.quantize import tiny_llama

CHUNK = 128


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pipeline")
    # the shipped texts cut short: the tiny model's tokens are bytes, and the test stays quick
    (folder / "cal.txt").write_text(CALIBRATION.read_text()[:2500])
    (folder / "held.txt").write_text(HELDOUT.read_text()[:1500])
    return tiny_llama.write(folder / "tiny.gguf")


def _options(src, target, output, compare=True):
    return QuantizeOptions(target, src.with_name("cal.txt"), src.with_name("held.txt"), output, CHUNK, 2, compare)


def test_the_mix_meets_its_size_and_beats_the_uniform_type_of_that_size(tiny):
    src = tiny
    out = src.with_name("tiny.mixed.gguf")
    # first the importance and sensitivity (kept beside the model), then a uniform Q4_K file with them
    steps: list[str] = []
    first = quantize(src, _options(src, Target(bpw=4.0), src.with_name("warmup.gguf"), compare=False),
                     lambda step, done, total: steps.append(step))
    assert {"importance", "tensor errors", "role probes", "quantize"} <= set(steps)
    imp_path = imatrix_file.path_beside(src)
    assert first.importance_path == imp_path and imp_path.is_file()
    imp = imatrix_file.load(imp_path)
    means = {n: imp.mean(n) for n in imp.sums}
    weights = SourceWeights(src)
    uniform = src.with_name("tiny.uniform.gguf")
    quantize_model(src, uniform, QuantizeSpec("Q8_0", {m.name: type_id("Q4_K") for m in weights.matrices}, means))
    size = uniform.stat().st_size

    steps.clear()
    r = quantize(src, _options(src, Target(size=size), out), lambda step, done, total: steps.append(step))
    assert "tensor errors" not in steps  # measured once per importance matrix
    assert r.size <= size
    assert r.size > 0.9 * size  # the budget is spent, not left over
    assert len(set(r.types.values())) > 1  # a mix, not one type
    ref = Reference(src, tokenize_text(src, src.with_name("held.txt").read_text(), CHUNK), threads=2)
    mixed, flat = ref.measure(out), ref.measure(uniform)
    assert mixed.kl_mean < flat.kl_mean, (mixed, flat)
    assert r.quality.kl_mean == pytest.approx(mixed.kl_mean, rel=1e-6)
    assert r.stock is not None and r.stock_quality is not None
    saved = json.loads(out.with_name(out.name + ".quality.json").read_text())
    assert saved["quality"]["kl_mean"] == r.quality.kl_mean
    assert not out.with_name(out.name + ".work").exists()


def test_a_cancelled_quantization_leaves_no_file(tiny, tmp_path):
    cancel = threading.Event()
    cancel.set()
    dst = tmp_path / "never.gguf"
    with pytest.raises(QuantizeCancelled):
        run_quantize(tiny, dst, QuantizeSpec("Q4_K_M"), cancel=cancel)
    assert not dst.exists() and not (tmp_path / "never.gguf.part").exists()


def test_the_command_registers_the_new_model(tiny, data_dir, capsys):
    from runtime.cli import main
    from runtime.store.registry import Registry

    out = tiny.with_name("tiny.cli.gguf")
    texts = ["--calibration", str(tiny.with_name("cal.txt")), "--heldout", str(tiny.with_name("held.txt")),
             "--chunk", str(CHUNK), "--threads", "2"]
    rc = main(["quantize", str(tiny), "--to", "5bpw", "--output", str(out), "--no-compare", "--json", *texts])
    assert rc == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    result = lines[-1]["result"]
    assert any(x.get("step") == "quantize" for x in lines[:-1])
    registered = Registry(data_dir).find(result["model_id"])
    assert registered.path == str(out.resolve())
    assert result["quality"]["kl_mean"] >= 0
    assert main(["quantize", str(tiny), "--to", "0.1MB", "--no-compare", *texts]) == 1  # under the smallest mix
