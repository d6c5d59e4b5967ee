"""Every whole-reply case of llama.cpp's ``tests/test-chat.cpp`` that Hearth's parser reads as
llama.cpp does, from the template alone: the contract is derived by rendering the template, the
reply parsed whole and streamed (one character at a time, and split in two at many points), and the
result compared with llama.cpp's expected message (content and reasoning with outer whitespace
stripped, calls by name and arguments).

``GAPS`` lists the cases Hearth does not read yet, by template and line of test-chat.cpp, with
the reason; they run and are reported as expected failures (one that starts passing is fine: take
it out of the list)."""

from __future__ import annotations

import json

import pytest

from runtime.chat.events import ReasoningDelta, TextDelta, ToolCallArgsDelta, ToolCallStart
from runtime.chat.output_parser import OutputParser
from tests.chat.llama_cases import Case, cases, contract, tools_of

#: template -> (lines of test-chat.cpp, why)
GAPS: dict[str, tuple[list[int], str]] = {}

CASES = cases()


def _gap(case: Case) -> str | None:
    lines, why = GAPS.get(case.template.removesuffix(".jinja"), ([], ""))
    return why if case.line in lines else None


def _read(case: Case, chunks: list[str]) -> tuple[str, str, tuple]:
    k = contract(case.template)
    r = k.reasoning
    in_r = bool(r and (r.opened if case.thinking else r.opened_off))
    p = OutputParser(k, tools_of(case), in_r, inline_reasoning=case.inline)
    events = [e for c in chunks for e in p.feed(c)] + p.finish()
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    thought = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    names = {e.index: e.name for e in events if isinstance(e, ToolCallStart)}
    args: dict[int, str] = {}
    for e in events:
        if isinstance(e, ToolCallArgsDelta):
            args[e.index] = args.get(e.index, "") + e.fragment
    streamed = tuple((names[i], _canonical(args.get(i, "{}"))) for i in sorted(names) if i < len(p.calls))
    whole = tuple((c["name"], _canonical(c["arguments"])) for c in p.calls)
    assert streamed == whole, "the streamed argument fragments differ from the calls read"
    return text, thought, whole


def _canonical(args: str) -> str:
    try:
        return json.dumps(json.loads(args), sort_keys=True)
    except ValueError:
        return args


def _matches(case: Case, got: tuple[str, str, tuple]) -> bool:
    text, thought, calls = got
    return text.strip() == case.content.strip() and thought.strip() == case.reasoning.strip() and calls == case.calls


@pytest.mark.parametrize("case", CASES, ids=[c.key for c in CASES])
def test_reads_as_llama_cpp_expects(case: Case):
    got = _read(case, [case.input])
    why = _gap(case)
    if why is not None and not _matches(case, got):
        pytest.xfail(why)
    assert got[0].strip() == case.content.strip()
    assert got[1].strip() == case.reasoning.strip()
    assert got[2] == case.calls


@pytest.mark.parametrize("case", [c for c in CASES if _gap(c) is None], ids=[c.key for c in CASES if _gap(c) is None])
def test_streamed_reads_the_same(case: Case):
    """One character at a time, and split in two at many points (every third, and every point
    inside and around the first marker): the same message."""
    expected = _read(case, [case.input])
    text = case.input
    assert _read(case, list(text)) == expected
    first = next((i for i, ch in enumerate(text) if ch in "<[{"), 0)
    cuts = set(range(1, len(text), 3)) | set(range(max(1, first - 2), min(len(text), first + 24)))
    for cut in sorted(cuts):
        assert _read(case, [text[:cut], text[cut:]]) == expected, cut


def test_most_cases_read():
    """The share of llama.cpp's cases read as it expects (the README's family table counts them)."""
    ok = sum(_matches(c, _read(c, [c.input])) for c in CASES)
    assert ok >= 373, f"{ok} of {len(CASES)}"
