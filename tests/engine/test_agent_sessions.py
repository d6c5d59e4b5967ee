"""A coding agent's sessions in three directories with the real models, through every tier.

As a user of a coding agent saw it: after some twenty requests from several directories, a
new session in the first directory read none of the ~17.8k tokens it shared with the earlier
sessions there (its tools and instructions), though their states were in the disk tier; the
session's next request read 99%. Here: three sessions per directory (the recorded Claude Code
request's system text and tools, a working-directory line, then each session's own request),
one directory at a time, the model's worker ended and started again between directories (an
unload when idle, then a reload), a context of 1,024 cells that one conversation half fills, a
host tier of about one conversation's state and a disk tier of a few. Then a new session in
the first directory, right after the last directory's, whose conversation still holds its
cells: it reads the whole shared prefix (less than a block short), then its next turn all of the
previous prompt.

Gemma 3 270M's sliding-window layers come back through checkpoints; one is saved where the
second session of a directory parts from the first, so the third and the new one read all of
the prefix, not only up to the checkpoint every 32 blocks.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import pytest

from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.engine.disk_cache import DiskCache, layout_key, model_identity
from runtime.engine.engine import CacheConfig, Engine
from runtime.kernels.block_hash import hash_blocks
from runtime.sampling_params import SamplingParams

B = 16
N_CTX = 1024
MIB = 1 << 20
_BODY = json.loads((Path(__file__).parents[1] / "server" / "agent_requests" / "claude_code.json").read_text())["body"]
# the first system block is the volatile billing header, which the service strips
SYSTEM = "\n".join(block["text"] for block in _BODY["system"][1:])[:1500]
TOOLS = json.dumps(_BODY["tools"])[:1500]
ASKS = ["Explain what main does.", "Refactor the config loader.", "Why does the build fail?",
        "Add a test for the parser."]
#: the disk tier in states of one conversation: the three directories' shared prefixes (with
#: Gemma, a checkpoint beside each state) within half of it, and too little room for the rest
DISK_STATES = {"smollm2": 7, "gemma": 12}


def text(directory: int, session: int, turn: int = 0) -> str:
    out = f"Working directory: /home/user/project{directory}\n{SYSTEM}\n# Tools\n{TOOLS}\n"
    out += f"User: {ASKS[session]}\n"
    for t in range(turn):
        out += f"Assistant: I read the files of step {t}.\nUser: Go on with step {t + 1}.\n"
    return out + "Assistant:"


def shared(prompt: list[int], others: list[list[int]]) -> int:
    """The longest prefix ``prompt`` shares with any of ``others``, in tokens."""
    return max(next((i for i, (a, b) in enumerate(zip(prompt, o)) if a != b), min(len(prompt), len(o)))
               for o in others)


class Worker:
    """One worker of the model: its own context and host tier, the folder of the disk tier."""

    def __init__(self, path: Path, folder: Path, host_mib: int, disk_bytes: int) -> None:
        self.backend = LlamaBackend(path, ContextConfig(n_ctx=N_CTX, n_seq_max=4, n_batch=512))
        key = layout_key(model_identity(path), B, "f16", None, f"llama-cpp-python {version('llama_cpp_python')}")
        self.disk = DiskCache(folder, disk_bytes, key)
        self.engine = Engine(self.backend, 2, CacheConfig(B, True, 0.0, host_mib=host_mib), disk=self.disk)
        self.n = 0

    def run(self, prompt_text: str) -> tuple[list[int], int]:
        """The prompt's tokens and how many of them came from cache."""
        prompt = self.backend.tokenize(prompt_text)
        self.n += 1
        request = self.engine.add_request(f"r{self.n}", prompt, SamplingParams(temperature=0, max_tokens=3))
        while self.engine.has_work():
            self.engine.step()
        return prompt, request.cached_tokens

    def close(self) -> None:
        self.backend.close()
        self.disk.close()  # the worker ends: its writes are done, its memory is gone


@pytest.mark.timeout(1800)  # four cold prefills of ~700 tokens and ten loads: minutes on a loaded 2-core machine
@pytest.mark.parametrize("model", ["smollm2", "gemma"])
def test_a_new_session_reads_its_directorys_shared_prefix_after_other_directories_sessions(
        model, smollm2_path, gemma_path, tmp_path):
    path = smollm2_path if model == "smollm2" else gemma_path
    folder = tmp_path / "prompt-cache"
    prompts: dict[tuple[int, int], list[int]] = {}
    cached: dict[tuple[int, int], int] = {}
    w = Worker(path, folder, host_mib=256, disk_bytes=1 << 30)
    try:
        prompts[0, 0], cached[0, 0] = w.run(text(0, 0))
        one = w.engine.stats().kv.host_tier.states.bytes  # one conversation's saved state
        for d in range(3):
            if d:  # the model is unloaded when idle, and loaded again for the next directory
                w.close()
                w = Worker(path, folder, host_mib=-(-3 * one // 2 // MIB), disk_bytes=DISK_STATES[model] * one)
            for s in range(3):
                if (d, s) != (0, 0):
                    prompts[d, s], cached[d, s] = w.run(text(d, s))
        # of the first directory, only what its sessions share is left on disk
        first = [w.disk.reach(hash_blocks(prompts[0, s], B)) for s in range(3)]
        new, reused = w.run(text(0, 3))
        turn, again = w.run(text(0, 3, 1))
    finally:
        w.close()
    want = shared(new, [prompts[0, s] for s in range(3)])
    print(f"{model}: shared prefix {want} tokens, a new session read {reused}, its next turn {again} of "
          f"{len(turn)}; earlier sessions {cached}")
    assert 600 < want < 800 and all(0 < n < 700 for n in first)
    assert first == [shared(prompts[0, s], [prompts[0, o] for o in range(3) if o != s]) // B for s in range(3)]
    for d in range(3):
        assert cached[d, 0] < 2 * B  # other directories share the working directory's first words only
        for s in (1, 2):
            part = shared(prompts[d, s], [prompts[d, o] for o in range(s)])
            if model == "gemma" and s == 1:  # the first to part: up to a checkpoint every 32 blocks
                assert cached[d, s] >= part // (32 * B) * 32 * B > 0, (d, s, cached[d, s], part)
            else:
                assert cached[d, s] >= part - B, (d, s, cached[d, s], part)
    assert reused >= want - B, (reused, want)
    assert again >= shared(turn, [new]) - B, (again, shared(turn, [new]))  # all of its previous prompt
