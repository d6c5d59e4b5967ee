"""What a pull of a model reference downloads: repo, commit and file(s), from the hub's metadata.

The model's file(s) come first (a download's path is its first file); after them what the model
needs beside it: an ONNX graph's tokenizer and configuration, or a GGUF model's multimodal
projector (``mmproj``), which lands in the same snapshot folder, where ``projector_for`` finds
it. Every file is fetched, resumed and SHA-256-checked alike, and counts in the space check.
"""

from __future__ import annotations

from dataclasses import dataclass

from runtime.store import checkpoint_pull, hub
from runtime.store.catalog import load_catalog
from runtime.store.refs import BadReference, parse_ref


class NothingToPull(ValueError):
    """The reference needs no download (a local file, an embedded model)."""


@dataclass(slots=True)
class PullTarget:
    model_id: str
    repo_id: str
    commit: str
    files: list[hub.RemoteFile]
    convert: str | None = None  #: "gptq" / "awq": a checkpoint, converted to a GGUF once downloaded


def onnx_companions(entry, remote: hub.RemoteRepo, model_file: str) -> list[hub.RemoteFile]:
    """What an ONNX model needs beside its graph: its tokenizer (required), the configuration
    files the catalog names that the repo has, and the graph's external weights if any."""
    if remote.file("tokenizer.json") is None:
        raise hub.HubError(f"{remote.repo_id} has no tokenizer.json: the ONNX model {entry.id} cannot run without it")
    names = [c for c in entry.raw.get("companions", []) if remote.file(c) is not None]
    names += [n for n in (f"{model_file}_data", f"{model_file}.data") if remote.file(n) is not None]
    found = [remote.file(n) for n in dict.fromkeys(names)]
    return [f.checked() for f in found if f is not None]  # each of them: names lists only files it has


def with_projector(files: list[hub.RemoteFile], remote: hub.RemoteRepo,
                   named: str | None = None) -> list[hub.RemoteFile]:
    """``files`` (a GGUF model's parts) and the projector the repo has for it, if any: the one
    the catalog ``named`` when the repo has it, else the repo's preferred ``mmproj`` file."""
    projector = remote.projector(files[0].name, named)
    return files + [projector] if projector is not None and projector not in files else files


def pull_target(ref: str, endpoint: str | None = None) -> PullTarget:
    """Resolve ``ref`` against the hub (blocking: one model-info request).

    Raises ``BadReference``, ``NothingToPull``, ``hub.RepoNotFound``, ``hub.NoGGUF`` or
    ``hub.HubError`` with a message for the user.
    """
    catalog = load_catalog()
    r = parse_ref(ref, frozenset(catalog))
    if r.kind == "path":
        raise NothingToPull(f"{ref} is a local file: import it (hearth import PATH) instead of pulling it")
    if r.kind == "catalog":
        assert r.catalog_id is not None  # parse_ref sets it for every catalog reference
        entry = catalog[r.catalog_id]
        if entry.embedded is not None:
            raise NothingToPull(f"{entry.id} ships with Hearth and needs no download")
        quant = r.quant or entry.default_quant
        spec = entry.quant_files(quant) if quant is not None else None
        if spec is None:
            raise BadReference(f"{entry.id} has no {quant} in the catalog; it has {', '.join(entry.quants)}")
        assert entry.repo is not None  # parse_catalog requires a repo of every entry
        remote = hub.repo_info(entry.repo, endpoint)
        files = remote.select(filename=spec[0])
        if entry.raw.get("format") == "onnx":
            files += onnx_companions(entry, remote, spec[0])
        else:
            files = with_projector(files, remote, entry.mmproj[0] if entry.mmproj else None)
        model_id = entry.id if quant == entry.default_quant else f"{entry.id}:{quant}"
        return PullTarget(model_id, remote.repo_id, remote.commit, files)
    assert r.repo_id is not None  # parse_ref sets it for every hub reference
    remote = hub.repo_info(r.repo_id, endpoint)
    if not remote.models() and r.quant is None and r.filename is None:
        method, files = checkpoint_pull.checkpoint_files(remote, checkpoint_pull.hub_endpoint_or(endpoint))
        return PullTarget(remote.repo_id, remote.repo_id, remote.commit, files, convert=method)
    files = with_projector(remote.select(quant=r.quant, filename=r.filename), remote)
    return PullTarget(f"{remote.repo_id}/{files[0].name}", remote.repo_id, remote.commit, files)


__all__ = ["BadReference", "NothingToPull", "PullTarget", "pull_target"]
