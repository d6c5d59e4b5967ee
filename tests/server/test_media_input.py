"""Base64 media decoded a chunk at a time: the same bytes, and the same refusals, as one call."""

import base64
import binascii
import random

import pytest

from runtime.server import media_input
from runtime.server.errors import ApiError
from runtime.server.media_input import MediaInput, b64decode


def _one_call(data: str, altchars: bytes | None) -> bytes | str:
    try:
        return base64.b64decode(data, altchars=altchars, validate=True)
    except (binascii.Error, ValueError):
        return "refused"


def _chunked(data: str, altchars: bytes | None) -> bytes | str:
    try:
        return b64decode(data, altchars)
    except (binascii.Error, ValueError):
        return "refused"


def test_chunked_decoding_answers_as_one_strict_call(monkeypatch):
    monkeypatch.setattr(media_input, "B64_CHUNK", 8)  # every string over two quads is cut
    rnd = random.Random(7)
    odd = "ABCabc019+/-_= \n="
    for _ in range(40_000):
        if rnd.random() < 0.5:
            data = base64.b64encode(rnd.randbytes(rnd.randint(0, 24))).decode()
            if data and rnd.random() < 0.6:  # one character changed: padding inside, a space, the other alphabet
                i = rnd.randrange(len(data))
                data = data[:i] + rnd.choice(odd) + data[i + 1:]
        else:
            data = "".join(rnd.choice(odd) for _ in range(rnd.randint(0, 30)))
        for altchars in (None, b"-_"):
            assert _chunked(data, altchars) == _one_call(data, altchars), (data, altchars)


def test_a_large_medium_is_decoded_whole_in_either_alphabet():
    raw = random.Random(3).randbytes(3 * media_input.B64_CHUNK + 5)
    standard = base64.b64encode(raw).decode()
    assert b64decode(standard) == raw
    media = MediaInput()
    for text in (standard, base64.urlsafe_b64encode(raw).decode()):
        media.add("audio", text, "input_audio.data")
    assert [m.data for m in media.items] == [raw, raw]
    broken = standard[:len(standard) // 2] + "=" + standard[len(standard) // 2 + 1:]
    with pytest.raises(ApiError, match="not valid base64"):
        media.add("audio", broken, "input_audio.data")
