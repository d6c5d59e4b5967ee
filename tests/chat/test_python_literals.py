"""Python literals in a Python-style call, read into JSON values without evaluating anything."""

from __future__ import annotations

import pytest

from runtime.chat.python_literals import Incomplete, NotLiteral, python_text, python_value

VALUES = [
    ("True", True), ("None", None), ("false", False), ("null", None), ("-12", -12), ("2.5e3", 2500.0),
    ('"a \\"quoted\\" word"', 'a "quoted" word'), ("'it\\'s'", "it's"), ('"tab\\there\\nnext"', "tab\there\nnext"),
    ('"\\u00e9t\\xe9"', "été"), ('{"on": True, "n": [1, 2, None]}', {"on": True, "n": [1, 2, None]}),
    ("['a', \"b\",]", ["a", "b"]), ("(1, 2)", [1, 2]), ("{}", {}), ("[]", []),
]


@pytest.mark.parametrize("text, value", VALUES)
def test_reads_the_literal_and_where_it_ends(text, value):
    assert python_value(text + ")", 0) == (len(text), value)


@pytest.mark.parametrize("text, value", VALUES)
def test_every_cut_is_incomplete_never_wrong(text, value):
    """Cut anywhere with more to come, the literal is incomplete: never read short (2 of 2.5e3)."""
    for cut in range(1, len(text)):
        with pytest.raises(Incomplete):
            python_value(text[:cut], 0, final=False)


@pytest.mark.parametrize("text", ["print('hi')", "os.system", "{1: 2}", "[1 2]", "lambda: 0", "Truth"])
def test_what_is_not_a_literal_is_refused(text):
    with pytest.raises(NotLiteral):
        python_value(text, 0)


def test_written_and_read_back():
    value = {"path": "a.py", "content": "print('hi')\n\"x\"", "n": 3, "ok": False, "none": None, "l": [1.5]}
    for quote in ('"', "'"):
        text = python_text(value, quote)
        assert python_value(text, 0) == (len(text), value)
