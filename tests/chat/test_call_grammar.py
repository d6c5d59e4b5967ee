"""For every template that renders tool calls: the call grammar compiles, the model's own markup
for a call (written from the derived syntax) is a sentence of that grammar, and the parser reads
it back to the same name and arguments. So a forced call is always in the family's own format
and always parses."""

from __future__ import annotations

import json
from pathlib import Path

import llguidance as llg
import pytest

from runtime.chat.call_text import call_text
from runtime.chat.output_parser import parse_all
from runtime.chat.template_analysis import contract_for
from runtime.engine import constraint
from runtime.engine.constraint_spec import LARK
from runtime.server.generate.call_grammar import call_grammar, grammar_trigger, trigger_is_ambiguous

TEMPLATES = sorted((Path(__file__).parent / "templates").glob("*.jinja"))
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"]}}},
    {"type": "function", "function": {"name": "write_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"]}}},
]
CALLS = [("get_weather", {"city": "Paris", "days": 3}), ("write_file", {"path": "a.py", "content": "print('hi')\n"})]


#: families whose calls the grammar does not yet write whole (none now; Muse Glimmer's calls
#: write the name twice, the second through ``NAME_SLOT``)
GAPS: dict[str, str] = {}


def _contracts():
    out = []
    for path in TEMPLATES:
        c = contract_for(path.read_text(), "<s>", "</s>")
        if c.calls is not None:
            marks = [pytest.mark.xfail(reason=GAPS[path.stem], strict=False)] if path.stem in GAPS else []
            out.append(pytest.param(c, id=path.stem, marks=marks))
    return out


def _accepts(grammar: str, text: str) -> bool:
    matcher = llg.LLMatcher(constraint._byte_tokenizer(), llg.LLMatcher.grammar_from_lark(grammar), log_level=0)
    ok = matcher.consume_tokens(list(text.encode()))
    return bool(ok) and not matcher.is_error() and matcher.is_accepting()


def test_most_templates_have_a_call_syntax():
    assert len(_contracts()) >= 50


@pytest.mark.parametrize("contract", _contracts())
@pytest.mark.parametrize("call", CALLS, ids=["number", "multiline"])
def test_a_forced_call_is_the_familys_own_and_parses(contract, call):
    syntax = contract.calls
    grammar = call_grammar(syntax, TOOLS, parallel=False)
    constraint.compile_constraint(LARK, grammar, "tools")
    text = call_text(syntax, [call])
    assert text.startswith(grammar_trigger(syntax)), (text, grammar_trigger(syntax))
    assert _accepts(grammar, text), (text, grammar)
    content, _, calls = parse_all(text, contract, TOOLS)
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [call], text
    assert content.strip() == ""


@pytest.mark.parametrize("contract", _contracts())
def test_parallel_calls_parse(contract):
    syntax = contract.calls
    text = call_text(syntax, CALLS)
    # a family whose answer is written between markers (gpt-oss's final channel) wraps it
    before = f"{contract.content_start}Let me check.{contract.content_end}" if contract.content_start else "Let me check.\n"
    content, _, calls = parse_all(before + text, contract, TOOLS)
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == CALLS, text
    assert "Let me check." in content and "<" not in content.replace("Let me check.", "")


BOUNDED = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "minLength": 2, "maxLength": 5},
                                     "days": {"type": "integer"}}, "required": ["city", "days"]}}}]


def _tagged():
    return [p for p in _contracts() if p.values[0].calls.body == "tagged"]


@pytest.mark.parametrize("contract", _tagged())
def test_a_raw_string_value_keeps_to_its_length(contract):
    """Tagged arguments write strings raw: the grammar holds them to minLength and maxLength as
    %json does for JSON bodies (a model must not write on inside a value until max_tokens)."""
    grammar = call_grammar(contract.calls, BOUNDED, parallel=False)
    fits = call_text(contract.calls, [("get_weather", {"city": "Paris", "days": 3})])
    assert _accepts(grammar, fits), (fits, grammar)
    for city in ("Lisbon", "P"):
        text = call_text(contract.calls, [("get_weather", {"city": city, "days": 3})])
        assert not _accepts(grammar, text), (text, grammar)


def test_a_call_index_beside_the_name_is_digits():
    """Command R7B writes each call's index as ``tool_call_id``: digits, a few of them."""
    source = (Path(__file__).parent / "templates" / "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja").read_text()
    syntax = contract_for(source, "<s>", "</s>").calls
    grammar = call_grammar(syntax, TOOLS, parallel=False)
    text = call_text(syntax, [CALLS[0]])
    assert '"tool_call_id": "0"' in text and _accepts(grammar, text)
    assert _accepts(grammar, text.replace('"tool_call_id": "0"', '"tool_call_id": "12"'))
    for other in ('"x"', '"1234567"', '""'):
        assert not _accepts(grammar, text.replace('"tool_call_id": "0"', f'"tool_call_id": {other}'))


@pytest.mark.parametrize("template", ["Mistral-Small-3.2-24B-Instruct-2506", "upstage-Solar-Open-100B"])
def test_a_call_id_in_the_markers_is_the_models_own(template):
    """Where the markers carry the call id, the model writes one per call (a fixed id would give
    every call of a reply, and of a conversation, the same id)."""
    contract = contract_for((Path(__file__).parent / "templates" / f"{template}.jinja").read_text(), "<s>", "</s>")
    grammar = call_grammar(contract.calls, TOOLS, parallel=True)
    text = call_text(contract.calls, CALLS)
    assert text.count("call00001") == 2, text
    text = text.replace("call00001", "a1B2c3D4e", 1).replace("call00001", "Zz9Yy8Xx7", 1)
    assert _accepts(grammar, text), (text, grammar)
    assert text.startswith(grammar_trigger(contract.calls)) and "call00001" not in grammar_trigger(contract.calls)
    _, _, calls = parse_all(text, contract, TOOLS)
    assert [c["id"] for c in calls] == ["a1B2c3D4e", "Zz9Yy8Xx7"] and [c["name"] for c in calls] == [n for n, _ in CALLS]
    for bad in ("short", "call-0001", "ten_chars0"):
        assert not _accepts(grammar, text.replace("a1B2c3D4e", bad)), bad


@pytest.mark.parametrize("contract", _contracts())
def test_an_answer_in_the_model_s_markup_starts_no_lazy_grammar(contract):
    """With ``tool_choice`` auto the call grammar waits for its trigger. An answer written in the
    model's own markup (its thinking, then its text) must not contain that trigger, or the
    grammar would force a call on it; where it does (a recipient frame: Functionary's ``>>>all``,
    Muse's ``to=user``), the trigger is ambiguous and auto goes without a grammar."""
    r = contract.reasoning
    answer = (f"{r.start}Let me think.{r.end}" if r is not None and r.start else "") + \
        f"{contract.content_start}The weather is fine.{contract.content_end}"
    trigger = grammar_trigger(contract.calls)
    assert (trigger in answer) == trigger_is_ambiguous(contract), (trigger, answer)


def test_recipient_frames_are_the_ambiguous_ones():
    ambiguous = {path.stem for path in TEMPLATES
                 if (c := contract_for(path.read_text(), "<s>", "</s>")).calls is not None and trigger_is_ambiguous(c)}
    assert ambiguous == {"meetkai-functionary-medium-v3.2", "muse-glimmer"}
