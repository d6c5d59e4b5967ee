"""The llama.cpp backend with the two embedded models."""

from __future__ import annotations

import pytest

from runtime.backends.errors import InvalidBatchError
from runtime.backends.llama import ContextConfig, LlamaBackend
from runtime.sampling_params import SamplingParams


@pytest.fixture(scope="module")
def smol(smollm2_path):
    b = LlamaBackend(smollm2_path, ContextConfig(n_ctx=2048, n_seq_max=4, n_batch=256))
    yield b
    b.close()


def greedy(b: LlamaBackend, prompt: list[int], n: int, seq: int = 0) -> list[int]:
    """Prefill then decode ``n`` tokens greedily on one sequence."""
    s = b.new_sampler(SamplingParams(temperature=0))
    b.batch.clear()
    i = b.batch.add(prompt, 0, seq, True)
    b.decode(b.batch)
    out, pos = [], len(prompt)
    for _ in range(n):
        tok = s.sample(b.ctx, i)
        out.append(tok)
        b.batch.clear()
        i = b.batch.add([tok], pos, seq, True)
        b.decode(b.batch)
        pos += 1
    s.close()
    b.seq_rm(seq)
    return out


def test_loads_smollm2_with_its_chat_template(smol):
    info = smol.info
    assert (info.n_vocab, info.n_layer, info.n_head_kv, info.n_swa) == (49152, 30, 3, 0)
    assert info.has_chat_template and not smol.chat_template.is_fallback
    assert smol.n_ctx == 2048
    toks = smol.chat_prompt([{"role": "user", "content": "Hi"}])
    text = smol.detokenize(toks)
    assert "Hi" in text and text.rstrip().endswith("assistant")


def test_loads_gemma3_with_sliding_window_and_plain_template(gemma_path):
    b = LlamaBackend(gemma_path, ContextConfig(n_ctx=1024, n_seq_max=2, n_batch=128))
    try:
        assert b.info.n_vocab == 262144 and b.info.n_swa == 512
        assert b.chat_template.is_fallback and b.chat_template.stop == ["\nUser:"]
        toks = b.chat_prompt([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
        assert toks[0] == 2  # Gemma's BOS is added by the tokenizer
        assert b.detokenize(toks) == "Be brief.\n\nUser: Hi\nAssistant:"
        assert len(greedy(b, toks, 4)) == 4
    finally:
        b.close()


def test_greedy_generation_is_deterministic(smol):
    prompt = smol.tokenize("The history of the printing press")
    assert greedy(smol, prompt, 16) == greedy(smol, prompt, 16)


def test_batched_sequences_match_a_single_sequence(smol):
    prompt = smol.tokenize("Three facts about the moon:")
    alone = greedy(smol, prompt, 12)
    samplers = [smol.new_sampler(SamplingParams(temperature=0)) for _ in range(3)]
    smol.batch.clear()
    idx = [smol.batch.add(prompt, 0, seq, True) for seq in range(3)]
    smol.decode(smol.batch)
    outs: list[list[int]] = [[], [], []]
    pos = len(prompt)
    for _ in range(12):
        toks = [s.sample(smol.ctx, i) for s, i in zip(samplers, idx)]
        smol.batch.clear()
        idx = []
        for seq, tok in enumerate(toks):
            outs[seq].append(tok)
            idx.append(smol.batch.add([tok], pos, seq, True))
        smol.decode(smol.batch)
        pos += 1
    for seq in range(3):
        smol.seq_rm(seq)
    assert outs == [alone] * 3


def test_seq_cp_shares_a_prefix_and_seq_rm_frees_it(smol):
    prompt = smol.tokenize("A list of prime numbers: 2, 3, 5,")
    expected = greedy(smol, prompt, 6)
    smol.batch.clear()
    smol.batch.add(prompt[:-1], 0, 0, False)
    smol.decode(smol.batch)
    assert (smol.seq_pos_min(0), smol.seq_pos_max(0)) == (0, len(prompt) - 2)
    smol.seq_cp(0, 1)
    smol.seq_rm(0)
    assert smol.seq_pos_max(0) is None
    assert smol.seq_pos_max(1) == len(prompt) - 2
    # seq 1 continues from the copied cells: same greedy tokens as computing it all
    s = smol.new_sampler(SamplingParams(temperature=0))
    smol.batch.clear()
    i = smol.batch.add(prompt[-1:], len(prompt) - 1, 1, True)
    smol.decode(smol.batch)
    assert s.sample(smol.ctx, i) == expected[0]
    s.close()
    smol.seq_rm(1, 3)
    assert smol.seq_pos_max(1) == 2
    smol.seq_rm(1)
    assert smol.seq_pos_max(1) is None


def test_invalid_batch_raises_a_typed_error(smol):
    smol.batch.clear()
    smol.batch.add([1, 2], 0, 7, True)  # seq_id 7 >= n_seq_max 4
    with pytest.raises(InvalidBatchError):
        smol.decode(smol.batch)


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_a_saved_state_loads_back_whether_kept_in_memory_or_read_from_disk(smol, kind):
    """A state is saved into one buffer (a bytearray, written by llama.cpp in place) and loaded
    without a copy, as it is kept in the host tier or as the disk tier reads it (bytes)."""
    prompt = smol.tokenize("The capital cities of Europe, in order: Paris, Berlin,")
    expected = greedy(smol, prompt, 4)
    smol.batch.clear()
    smol.batch.add(prompt[:-1], 0, 0, False)
    smol.decode(smol.batch)
    saved = smol.state_seq_save(0)
    smol.seq_rm(0)
    assert len(saved) > 0 and smol.seq_pos_max(2) is None
    assert smol.state_seq_load(2, kind(saved))
    assert smol.seq_pos_max(2) == len(prompt) - 2
    s = smol.new_sampler(SamplingParams(temperature=0))
    out, pos, tok = [], len(prompt) - 1, prompt[-1]
    for _ in range(4):  # the restored cells continue exactly as the whole prompt computed at once
        smol.batch.clear()
        i = smol.batch.add([tok], pos, 2, True)
        smol.decode(smol.batch)
        tok = s.sample(smol.ctx, i)
        out.append(tok)
        pos += 1
    s.close()
    smol.seq_rm(2)
    assert out == expected
    assert not smol.state_seq_load(3, kind(saved[: len(saved) // 2]))  # a cut state is refused
    smol.seq_rm(3)
