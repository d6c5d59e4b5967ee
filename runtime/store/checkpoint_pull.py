"""A GPTQ or AWQ repository (safetensors with a ``quantization_config``) pulled as a GGUF.

Such a repository has no GGUF file. A pull then downloads what the conversion reads (the
configuration, the safetensors shards, the tokenizer) into the Hugging Face cache like any
other file, and converts it afterwards (``hearth convert`` in a child process: a crash or a
huge checkpoint costs the service nothing, and a cancel stops it) into Hearth's data
directory, where it is registered as a local model. The 4-bit matrices stay 4-bit
(``runtime.quantize.hf_import``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from runtime.private_files import private_dir

from runtime.store import hub
from runtime.store.fetch import resolve_url

#: the quantization methods a pull converts (what ``hf_import`` reads)
METHODS = ("gptq", "awq")
#: files the conversion reads, besides the ``*.safetensors`` shards
COMPANIONS = ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json")
CONFIG_LIMIT = 1 << 20  #: bytes of config.json read at most
#: the converter child's memory and time beyond what the checkpoint's size accounts for
CONVERT_BASE_BYTES, CONVERT_BASE_S, CONVERT_S_PER_GIB = 4 << 30, 300.0, 120.0


class NotACheckpoint(hub.NoGGUF):
    """The repository has no GGUF and is not a GPTQ or AWQ checkpoint Hearth converts."""


def quant_method(config: dict) -> str | None:
    qc = config.get("quantization_config")
    if not isinstance(qc, dict):
        return None
    method = str(qc.get("quant_method", "")).lower()
    return method if method in METHODS else None


def read_config(remote: hub.RemoteRepo, endpoint: str) -> dict:
    """The repository's config.json (blocking; size- and time-limited: the hub is untrusted)."""
    import httpx2

    url = resolve_url(endpoint, remote.repo_id, remote.commit, "config.json")
    try:
        with httpx2.stream("GET", url, follow_redirects=True, timeout=30) as r:
            if r.status_code != 200:
                raise hub.HubError(f"{remote.repo_id}: config.json answered HTTP {r.status_code}")
            body = b""
            for chunk in r.iter_bytes():
                body += chunk
                if len(body) > CONFIG_LIMIT:
                    raise hub.UntrustedMetadata(f"{remote.repo_id}: config.json is larger than {CONFIG_LIMIT} bytes")
    except httpx2.TransportError as e:
        raise hub.HubUnreachable(f"cannot read {remote.repo_id}'s config.json: {e}") from None
    try:
        config = json.loads(body)
    except ValueError as e:
        raise hub.UntrustedMetadata(f"{remote.repo_id}: config.json is not JSON ({e})") from None
    if not isinstance(config, dict):
        raise hub.UntrustedMetadata(f"{remote.repo_id}: config.json is not an object")
    return config


def checkpoint_files(remote: hub.RemoteRepo, endpoint: str) -> tuple[str, list[hub.RemoteFile]]:
    """The method (``gptq`` or ``awq``) and the files to download, for a repository without GGUF
    files; raises ``NotACheckpoint`` saying what the repository is instead."""
    shards = [f for f in remote.files if f.name.endswith(".safetensors") and "/" not in f.name]
    if remote.file("config.json") is None or not shards:
        raise NotACheckpoint(f"{remote.repo_id} has no GGUF files: Hearth runs GGUF models, and converts GPTQ and AWQ "
                             "checkpoints; search for a GGUF version of this model (hearth search NAME)")
    config = read_config(remote, hub_endpoint_or(endpoint))
    method = quant_method(config)
    if method is None:
        found = (config.get("quantization_config") or {}).get("quant_method") if isinstance(
            config.get("quantization_config"), dict) else None
        what = f"a {found} checkpoint" if found else "not quantized"
        raise NotACheckpoint(f"{remote.repo_id} has no GGUF files and is {what}: Hearth converts GPTQ and AWQ "
                             "checkpoints only; search for a GGUF version of this model (hearth search NAME)")
    if remote.file("tokenizer.json") is None:
        raise NotACheckpoint(f"{remote.repo_id} is a {method.upper()} checkpoint without tokenizer.json: "
                             "Hearth converts checkpoints with a byte-level BPE tokenizer.json only")
    names = [n for n in COMPANIONS if remote.file(n) is not None]
    return method, [f.checked() for f in [*(remote.file(n) for n in names), *shards] if f is not None]


def file_summary(remote: hub.RemoteRepo, endpoint: str | None = None) -> list[dict]:
    """The repository's GGUF files (``RemoteRepo.gguf_summary``), or, for a GPTQ or AWQ checkpoint,
    one row for the whole checkpoint with ``convert`` set; blocking."""
    rows = remote.gguf_summary()
    if rows:
        return rows
    try:
        method, files = checkpoint_files(remote, hub_endpoint_or(endpoint))
    except NotACheckpoint:
        return []
    sizes = [f.size for f in files]
    return [{"file": f"{method.upper()} checkpoint", "quant": None, "parts": len(files), "convert": method,
             "size": sum(s for s in sizes if s is not None) if all(s is not None for s in sizes) else None}]


def hub_endpoint_or(endpoint: str | None) -> str:
    from runtime.store.hf_cache import hub_endpoint

    return endpoint or hub_endpoint()


def converted_path(repo_id: str, commit: str) -> Path:
    """Where a checkpoint's GGUF is written: Hearth's data directory, one file per commit."""
    from runtime.config import data_dir

    name = re.sub(r"[^A-Za-z0-9_.\-]+", "-", repo_id.split("/")[-1]) or "model"
    return data_dir() / "converted" / commit[:12] / f"{name}.gguf"  # the file's stem names the model


@dataclass(slots=True, frozen=True)
class ConvertLimits:
    """What the converter child may take: its address space (``RLIMIT_AS``, set in the child on
    Linux) and its time. Both follow the checkpoint's real size (``for_folder``), so a tiny
    checkpoint whose config asks for gigabytes fails quickly and costs the machine nothing."""

    memory_bytes: int
    seconds: float

    @classmethod
    def for_folder(cls, folder: Path) -> "ConvertLimits":
        # the converter holds the packed shards, their float32 weights (8x a 4-bit matrix) and
        # the GGUF's blocks at once: 16x the files, plus the interpreter, numpy and the tokenizer
        size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
        return cls(CONVERT_BASE_BYTES + 16 * size, CONVERT_BASE_S + CONVERT_S_PER_GIB * size / (1 << 30))


async def convert(folder: Path, repo_id: str, commit: str, limits: ConvertLimits | None = None) -> Path:
    """The GGUF of the checkpoint in ``folder`` (written once; a finished file is reused).
    Raises ``ValueError`` with the converter's reason when it fails or passes its ``limits``
    (by default ``ConvertLimits.for_folder``)."""
    out = converted_path(repo_id, commit)
    if out.is_file():
        return out
    limits = limits or ConvertLimits.for_folder(folder)
    private_dir(out.parent)
    part = out.with_name(out.name + ".part")
    # one BLAS thread: the converter does no matrix products, and every thread reserves memory
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "runtime.cli", "convert", str(folder), "--output", str(part), "--no-register",
        "--name", repo_id.split("/")[-1], "--memory-limit", str(limits.memory_bytes),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        start_new_session=True, env=env)  # it writes owner-only files itself (hearth convert's umask)
    try:
        _, err = await asyncio.wait_for(proc.communicate(), limits.seconds)
    except (asyncio.CancelledError, asyncio.TimeoutError) as e:  # paused, cancelled, the service stops, too slow
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        part.unlink(missing_ok=True)
        if isinstance(e, asyncio.TimeoutError):
            raise ValueError(f"{repo_id} could not be converted: the conversion took longer than "
                             f"{limits.seconds:.0f} s") from None
        raise
    if proc.returncode != 0:
        part.unlink(missing_ok=True)
        reason = err.decode(errors="replace").strip().splitlines()
        raise ValueError(f"{repo_id} could not be converted: {reason[-1] if reason else f'exit {proc.returncode}'}"
                         .replace("hearth: ", ""))
    os.replace(part, out)
    return out


def register(path: Path) -> str:
    """Add the converted file to the local models; its id."""
    from runtime.config import data_dir
    from runtime.store.registry import Registry

    return Registry(data_dir()).import_file(path).id
