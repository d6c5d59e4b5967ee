"""Context-overflow policies: whole turns left out, the fewest that make the conversation fit."""

from __future__ import annotations

import pytest

from runtime.engine.context_overflow import ROLLING_WINDOW, TRUNCATE_MIDDLE, fit, reply_room, without_turns


def _chat(n_turns: int, calls: bool = False) -> list[dict]:
    out = [{"role": "system", "content": "sys"}]
    for i in range(n_turns):
        out.append({"role": "user", "content": f"u{i}"})
        if calls:
            out.append({"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}"}]})
            out.append({"role": "tool", "content": f"r{i}", "tool_call_id": f"c{i}"})
        out.append({"role": "assistant", "content": f"a{i}"})
    return out


def _tokenize(messages: list[dict]) -> list[int]:
    return [0] * sum(10 for _ in messages)  # ten tokens a message


def _texts(messages: list[dict]) -> list[str]:
    return [m["content"] for m in messages]


def test_rolling_window_keeps_the_system_prompt_and_the_last_turns():
    chat = _chat(10)  # 21 messages: 210 tokens
    got = fit(chat, ROLLING_WINDOW, _tokenize, 100)
    kept, dropped = without_turns(chat, ROLLING_WINDOW, 6)
    assert got.dropped == dropped == 12 and len(got.tokens) == 90
    assert _texts(kept) == ["sys", "u6", "a6", "u7", "a7", "u8", "a8", "u9", "a9"]


def test_truncate_middle_keeps_the_first_turn_too():
    chat = _chat(10)
    got = fit(chat, TRUNCATE_MIDDLE, _tokenize, 100)
    kept, dropped = without_turns(chat, TRUNCATE_MIDDLE, 6)
    assert got.dropped == dropped == 12 and len(got.tokens) == 90
    assert _texts(kept) == ["sys", "u0", "a0", "u7", "a7", "u8", "a8", "u9", "a9"]


def test_a_call_leaves_with_its_result():
    chat = _chat(4, calls=True)  # each turn: user, call, result, answer
    kept, dropped = without_turns(chat, ROLLING_WINDOW, 1)
    assert dropped == 4 and kept[1] == {"role": "user", "content": "u1"}
    assert [m["role"] for m in kept[1:5]] == ["user", "assistant", "tool", "assistant"]


def test_what_fits_is_sent_whole_and_the_last_turn_is_never_left_out():
    chat = _chat(3)
    assert fit(chat, ROLLING_WINDOW, _tokenize, 1000).dropped == 0
    got = fit(chat, ROLLING_WINDOW, _tokenize, 5)  # not even the last turn fits: all that may go, went
    assert got.dropped == 4 and len(got.tokens) == 30
    assert fit(_chat(1), TRUNCATE_MIDDLE, _tokenize, 5).dropped == 0


@pytest.mark.parametrize("max_tokens, room", [(None, 1024), (100, 100), (10_000, 2048)])
def test_the_reply_keeps_its_room(max_tokens, room):
    assert reply_room(max_tokens, 4096) == room
