"""What the Hugging Face Hub says about a repo, through huggingface_hub: files, sizes, sha256.

One ``model_info(files_metadata=True)`` call gives the commit ``main`` points to and, per
file, its size and LFS sha256 (the checksum every download is verified against). The
endpoint is ``$HF_ENDPOINT`` read at call time (``hf_cache.hub_endpoint``). huggingface_hub
and its HTTP client are imported by the calls that ask the hub (about 0.25 s, which the
service's start does not wait for).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from runtime.store.gguf_names import PREFERRED_QUANTS, is_auxiliary, is_gguf, quant_of, split_part
from runtime.store.hf_cache import (
    UntrustedName, checked_commit, checked_etag, checked_filename, checked_sha256, hub_endpoint,
)
from runtime.store.projector import preferred_projector

if TYPE_CHECKING:
    from huggingface_hub import HfApi



class HubError(RuntimeError):
    """The hub could not answer what the store asked; the message says why and what to do."""


class RepoNotFound(HubError):
    pass


class NoGGUF(HubError):
    pass


class HubUnreachable(HubError):
    pass


class UntrustedMetadata(HubError):
    """The hub's answer holds an identifier or file name that cannot safely name a file."""


@dataclass(slots=True, frozen=True)
class RemoteFile:
    name: str
    size: int | None
    sha256: str | None  #: the LFS sha256 (None for a file kept in git, not LFS)
    blob_id: str | None

    @property
    def etag(self) -> str:
        """The name of the file's blob in the cache (huggingface_hub's convention)."""
        return self.sha256 or self.blob_id or ""

    def checked(self) -> "RemoteFile":
        """This file, when its name and identifiers can safely become file names; raises
        ``UntrustedMetadata`` otherwise (the hub's answer is untrusted input)."""
        try:
            checked_filename(self.name)
            if self.sha256 is not None:
                checked_sha256(self.sha256, self.name)
            checked_etag(self.etag, self.name)
            if self.size is not None and (isinstance(self.size, bool) or not isinstance(self.size, int)
                                          or self.size < 0):
                raise UntrustedName(f"the hub lists the size of {self.name} as {self.size!r}")
        except UntrustedName as e:
            raise UntrustedMetadata(str(e)) from None
        return self

    @property
    def quant(self) -> str | None:
        return quant_of(self.name)


@dataclass(slots=True)
class RemoteRepo:
    repo_id: str
    commit: str
    files: list[RemoteFile] = field(default_factory=list)

    def file(self, name: str) -> RemoteFile | None:
        return next((f for f in self.files if f.name == name), None)

    def models(self) -> list[RemoteFile]:
        """The GGUF model files (first parts only for split models), without projectors."""
        return [f for f in self.files if is_gguf(f.name) and not is_auxiliary(f.name)
                and ((part := split_part(f.name)) is None or part.index == 1)]

    def parts(self, first: RemoteFile) -> list[RemoteFile]:
        """All files of the model whose first file is ``first`` (one unless it is split)."""
        part = split_part(first.name)
        if part is None:
            return [first]
        found = [self.file(n) for n in part.names()]
        missing = [n for n, f in zip(part.names(), found) if f is None]
        if missing:
            raise HubError(f"{self.repo_id} lacks part(s) {', '.join(missing)} of the split model {first.name}")
        return [f for f in found if f is not None]  # all of them: none is missing

    def select(self, quant: str | None = None, filename: str | None = None) -> list[RemoteFile]:
        """The file(s) to download for a quantization or a file name (split parts included),
        each checked to be safe to store (``RemoteFile.checked``)."""
        return [f.checked() for f in self._select(quant, filename)]

    def _select(self, quant: str | None, filename: str | None) -> list[RemoteFile]:
        models = self.models()
        if filename is not None:
            f = self.file(filename)
            if f is None:
                raise HubError(f"{self.repo_id} has no file {filename!r}; its GGUF files: {_names(models)}")
            part = split_part(f.name)
            first = self.file(part.name(1)) if part else f
            if first is None:  # the hub's listing is untrusted: a split model without its first part
                raise HubError(f"{self.repo_id} lists {f.name} but not the first part of its split model")
            return self.parts(first)
        if not models:
            raise NoGGUF(f"{self.repo_id} has no GGUF files: Hearth runs GGUF models; search for a GGUF "
                         "version of this model (hearth search NAME)")
        if quant is not None:
            hits = [f for f in models if f.quant == quant.upper()]
            if not hits:
                have = sorted({f.quant for f in models if f.quant})
                raise HubError(f"{self.repo_id} has no {quant.upper()} GGUF; it has {', '.join(have) or _names(models)}")
            return self.parts(hits[0])
        for q in PREFERRED_QUANTS:
            hits = [f for f in models if f.quant == q]
            if hits:
                return self.parts(hits[0])
        return self.parts(models[0])

    def projector(self, model: str, named: str | None = None) -> RemoteFile | None:
        """The multimodal projector to fetch with the model file ``model``, checked: the file
        ``named`` (the catalog's) when the repo has it, else the preferred ``mmproj`` GGUF
        (``projector.PREFERENCE``); only one in the model's own folder, where ``projector_for``
        looks for it. None for a text-only model."""
        folder = model.rpartition("/")[0]
        beside = [f.name for f in self.files if f.name.rpartition("/")[0] == folder]
        name = named if named is not None and named in beside else preferred_projector(beside)
        found = self.file(name) if name is not None and name != model else None
        return found.checked() if found is not None else None

    def gguf_summary(self) -> list[dict]:
        """One entry per model file: name, quantization, total bytes (all parts), parts."""
        out = []
        for f in self.models():
            parts = self.parts(f)
            sizes = [p.size for p in parts]
            known = [s for s in sizes if s is not None]
            out.append({"file": f.name, "quant": f.quant, "parts": len(parts),
                        "size": sum(known) if len(known) == len(sizes) else None})
        return out


def _names(files: list[RemoteFile]) -> str:
    return ", ".join(f.name for f in files[:8]) or "none"


def api(endpoint: str | None = None) -> HfApi:
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint or hub_endpoint())


def repo_info(repo_id: str, endpoint: str | None = None) -> RemoteRepo:
    """The repo's commit and files (sizes, sha256). Blocking: call it from a thread in async code."""
    import httpx2
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, HFValidationError, RepositoryNotFoundError

    try:
        info = api(endpoint).model_info(repo_id, files_metadata=True)
    except RepositoryNotFoundError:
        raise RepoNotFound(f"no model repository {repo_id!r} on the hub (check the name; "
                           "private and gated repositories need a token)") from None
    except GatedRepoError:
        raise HubError(f"{repo_id} is gated: accept its license on the hub and log in (hf auth login)") from None
    except HFValidationError as e:
        raise RepoNotFound(f"{repo_id!r} is not a valid repository name: {e}") from None
    except HfHubHTTPError as e:
        # A hub (or mirror) that answers a plain 404 without huggingface_hub's error code header
        if getattr(e.response, "status_code", None) == 404:
            raise RepoNotFound(f"no model repository {repo_id!r} on the hub (check the name)") from None
        raise HubError(f"the hub refused the request for {repo_id}: {e}") from None
    except (httpx2.TransportError, OSError) as e:
        raise HubUnreachable(f"cannot reach the hub at {endpoint or hub_endpoint()}: {e}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # huggingface_hub parsing a malformed answer
        raise UntrustedMetadata(f"the hub's answer for {repo_id} is malformed ({type(e).__name__}: {e})") from None
    # a file listed without a size has its LFS size, if any (else the download asks the hub for one)
    files = [RemoteFile(s.rfilename, s.size if s.size is not None or not s.lfs else s.lfs.size,
                        s.lfs.sha256 if s.lfs else None, s.blob_id)
             for s in info.siblings or []]
    try:
        commit = checked_commit(info.sha)
    except UntrustedName as e:
        raise UntrustedMetadata(f"{repo_id}: {e}") from None
    if not isinstance(info.id, str) or info.id.lower() != repo_id.lower():
        raise UntrustedMetadata(f"asked for {repo_id}, the hub answered for {str(info.id)[:80]!r}")
    return RemoteRepo(info.id, commit, files)


def search(query: str, limit: int = 20, endpoint: str | None = None) -> list[dict]:
    """Hub models matching ``query`` that have GGUF files, most downloaded first."""
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError

    try:
        models = api(endpoint).list_models(search=query or None, filter="gguf", sort="downloads", limit=limit)
        return [{"repo": m.id, "downloads": m.downloads, "likes": m.likes,
                 "updated": m.last_modified.isoformat() if m.last_modified else None,
                 "tags": list(m.tags or [])} for m in models]
    except HfHubHTTPError as e:
        raise HubError(f"the hub refused the search: {e}") from None
    except (httpx2.TransportError, OSError) as e:
        raise HubUnreachable(f"cannot reach the hub at {endpoint or hub_endpoint()}: {e}") from None
