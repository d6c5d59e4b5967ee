"""The one resolver with a confinement: the decision is made on the normalised reference and
the real path, so whitespace, the working directory, symlinks and imported rows cannot widen it."""

from __future__ import annotations

import json

import pytest

from runtime.store.resolve import Confinement, ModelPathRefused, UnknownModel, resolve_model
from tests.hardware.ggufs import write_model


@pytest.fixture()
def roots(tmp_path):
    data, models, outside = tmp_path / "data", tmp_path / "models", tmp_path / "outside"
    for d in (data, models, outside):
        d.mkdir()
    write_model(outside / "victim.gguf", n_layer=1)
    write_model(models / "ok.gguf", n_layer=1)
    return data, models, outside, Confinement.of(data, [models])


def test_whitespace_cannot_move_the_check_away_from_the_file_opened(roots, monkeypatch):
    data, models, outside, confine = roots
    monkeypatch.chdir(models)  # the working directory lies inside an allowed folder
    for ref in (" ../outside/victim.gguf", "../outside/victim.gguf ", "\t./../outside/victim.gguf"):
        with pytest.raises(ModelPathRefused):
            resolve_model(ref, data, confine)
    assert resolve_model("  ./ok.gguf ", data, confine).path == models / "ok.gguf"


def test_a_relative_name_is_not_probed_on_disk_for_a_request(roots, monkeypatch):
    data, models, outside, confine = roots
    monkeypatch.chdir(outside)
    with pytest.raises(UnknownModel):  # read as a hub reference, never as the file beside the service
        resolve_model("victim.gguf/x", data, confine)
    (outside / "sub").mkdir()
    write_model(outside / "sub" / "m.gguf", n_layer=1)
    with pytest.raises(UnknownModel, match="not downloaded"):
        resolve_model("sub/m.gguf", data, confine)


def test_a_symlinked_folder_inside_a_root_that_leads_out_is_refused(roots):
    data, models, outside, confine = roots
    (models / "elsewhere").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ModelPathRefused):
        resolve_model(str(models / "elsewhere" / "victim.gguf"), data, confine)
    with pytest.raises(ModelPathRefused):
        resolve_model(str(models / "elsewhere" / "no-such.gguf"), data, confine)


@pytest.mark.parametrize("ref", ["evil/repo//etc/x.gguf", "evil/repo/./x.gguf", "evil/repo/a//b.gguf",
                                 "evil/repo/a\\..\\b.gguf", "smollm2-135m\x00.gguf"])
def test_malformed_references_are_refused(roots, ref):
    data, _, _, confine = roots
    with pytest.raises((UnknownModel, ModelPathRefused)):
        resolve_model(ref, data, confine)


def test_an_imported_row_cannot_shadow_a_catalog_id(roots, smollm2_path):
    data, _, outside, confine = roots
    (data / "imports.json").write_text(json.dumps({"models": [
        {"id": "smollm2-135m", "name": "x", "source": "imported", "path": str(outside / "victim.gguf"), "size": 1}]}))
    resolved = resolve_model("smollm2-135m", data)
    assert resolved.path.name == "smollm2-135m.gguf" and resolved.path.parent.parent == data
