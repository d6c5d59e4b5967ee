from runtime.engine.text_stream import TextStream


def feed(stream: TextStream, pieces: list[bytes]) -> tuple[str, bool]:
    out = []
    for p in pieces:
        text, hit = stream.push(p)
        out.append(text)
        if hit:
            return "".join(out), True
    out.append(stream.flush())
    return "".join(out), False


def test_multibyte_character_split_across_tokens_is_held_until_complete():
    s = TextStream([])
    euro = "€".encode()  # 3 bytes
    assert s.push(b"a" + euro[:1]) == ("a", False)
    assert s.push(euro[1:2]) == ("", False)
    assert s.push(euro[2:]) == ("€", False)


def test_stop_string_split_across_tokens_never_leaks():
    s = TextStream(["END"])
    emitted = [s.push(p) for p in (b"hello E", b"N", b"D tail")]
    assert emitted == [("hello ", False), ("", False), ("", True)]


def test_partial_stop_prefix_is_released_when_it_does_not_complete():
    s = TextStream(["END"])
    assert s.push(b"x E") == ("x ", False)
    assert s.push(b"ok") == ("Eok", False)


def test_earliest_of_several_stop_strings_wins():
    text, hit = feed(TextStream(["B", "AB"]), [b"xxAB"])
    assert (text, hit) == ("xx", True)


def test_flush_returns_held_text_at_end():
    text, hit = feed(TextStream(["STOP"]), [b"abc S", b"T"])
    assert (text, hit) == ("abc ST", False)
