"""A chat template's output contract, derived by rendering it (llama.cpp's differential analysis).

- Calls: ``call_analysis`` (a turn with and without calls).
- Reasoning: a turn with and without ``reasoning_content``: the markers around the thinking; and
  the generation prompt with thinking on and off: a closed empty block gives the markers, a prompt
  that ends with the opening marker leaves the thinking open (the model writes only its end).
- Answer text: what the template writes between the generation prompt and a plain turn's text
  (gpt-oss's ``<|channel|>final<|message|>``, Command R's ``<|START_RESPONSE|>``) is markup the
  model writes around its answer; so is a header in the calls' frame with a recipient where a
  call has its function's name (Functionary v3.2's ``>>>all``, Muse Glimmer's
  ``to=user<|message|>``). A generation prompt that ends with a call's first marker
  (Functionary's ``>>>``) leaves the model to name the recipient: the reply goes on from it.
- Thinking a template renders nowhere but asks for in words (Granite 3.3):
  ``documented_reasoning``.

Markers are told apart from role markup by where else they appear: a marker that also surrounds
the user's turn (``<|im_start|>``, ``<|im_end|>``) is the conversation's, not the thinking's.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from runtime.chat.call_analysis import USER, analyze_calls
from runtime.chat.contract import JSON, PYTHON, TAGGED, CallSyntax, OutputContract, ReasoningSyntax
from runtime.chat.documented_calls import documented_calls
from runtime.chat.documented_reasoning import documented_reasoning
from runtime.chat.renderer import ChatRenderer, ChatTemplateError
from runtime.chat.text_diff import MARKER, common_prefix, diff, last_marker, markers

log = logging.getLogger("hearth.chat")

THINK = "REASON_PART I am thinking END_R"
TEXT = "A_ASST_MSG I can help END_A"

#: render(messages, tools, add_generation_prompt, enable_thinking) -> prompt, None when refused
FullRender = Callable[[list[dict], "list[dict] | None", bool, "bool | None"], "str | None"]


def analyze(render: FullRender, source: str = "") -> OutputContract:
    """The contract of the template that ``render`` renders (``source``: its text, to check a
    derived closing marker against)."""
    calls = analyze_calls(lambda msgs, tools: render(msgs, tools, False, None))
    plain = render([USER, {"role": "assistant", "content": TEXT}], None, False, None)
    user_marks = _user_markers(render)
    reasoning = _reasoning(render, source, user_marks)
    answer_marks: tuple[str, ...] = ()
    if reasoning is None and (documented := documented_reasoning(source)) is not None:
        reasoning, answer_marks = documented  # thinking the prompt asks for in words (Granite 3.3)
    tools_probe = render([USER], [_probe_tool()], True, None)
    bare = render([USER], None, True, None)
    native = tools_probe is not None and bare is not None and "PROBE_TOOL_NAME" in tools_probe
    renders_calls = calls is not None
    if calls is not None:
        calls = python_style(calls)
    elif native and tools_probe is not None:
        calls = documented_calls(tools_probe)
    if calls is not None and reasoning is not None and reasoning.start:
        calls = _without_empty_thinking(calls, reasoning)
    tail = _prompt_tail(bare, calls)
    start, end = _content_markers(render, plain, reasoning, user_marks, tail, calls)
    noise = _header(render, reasoning, user_marks) + _turn_end(plain, end) + answer_marks
    if calls is not None:
        calls = _without_header(calls, noise)
    return OutputContract(calls=calls, reasoning=reasoning, content_start=start, content_end=end, native_tools=native,
                          noise=noise, renders_calls=renders_calls, prompt_tail=tail)


def _prompt_tail(prompt: str | None, calls: CallSyntax | None) -> str:
    """The start of a call that the generation prompt ends with (Functionary v3.2's ``>>>``):
    the header of a message whose recipient the model names, a function's or another's
    (``>>>all`` for its answer). The reply goes on from it."""
    first = calls.trigger.strip() if calls is not None else ""
    return first if first and prompt is not None and prompt.rstrip().endswith(first) else ""


def _recipient_frame(written: str, calls: CallSyntax | None) -> bool:
    """The answer's header is written where a call's is, in the same frame, with a recipient in
    the place of the function's name (Functionary v3.2's ``>>>all``, Muse Glimmer's
    ``to=user<|message|>``): the model writes it, as it writes a call's."""
    first = calls.trigger.strip() if calls is not None and calls.section_start.strip() == "" else ""
    return bool(first) and calls is not None and calls.body != JSON and written.startswith(first) \
        and re.fullmatch(r"\w+", written[len(first):].split("<", 1)[0].strip()) is not None


def _without_header(calls: CallSyntax, noise: tuple[str, ...]) -> CallSyntax:
    """A call's first marker without the assistant's header, where the template writes calls as
    a turn of their own (Nemotron Nano v2: ``<SPECIAL_11>Assistant\n<TOOLCALL>``): the model
    writes the calls in the turn it is in."""
    for field in ("section_start", "call_start"):
        first = getattr(calls, field)
        if not first.strip():
            continue
        for header in noise:
            rest = first.lstrip()[len(header):] if first.lstrip().startswith(header) else None
            if rest is not None and MARKER.search(rest):
                return replace(calls, **{field: rest.lstrip()})
        return calls
    return calls


def _turn_end(plain: str | None, content_end: str) -> tuple[str, ...]:
    """The marker the template writes right after an assistant turn's text (Ling's
    ``<|role_end|>``): the turn's end, which a model whose end-of-generation token is another
    writes as text."""
    if plain is None or TEXT not in plain or content_end:
        return ()
    after = MARKER.match(plain, _skip_ws(plain, plain.find(TEXT) + len(TEXT)))
    return (after.group(),) if after is not None else ()


def python_style(calls: CallSyntax) -> CallSyntax:
    """Tagged arguments that read ``NAME(KEY=VALUE, ...)`` are a Python call: its values are
    Python literals (LFM2.5 renders ``toggle(enabled=True)``), not raw text."""
    if calls.body == TAGGED and calls.name_suffix.strip() == "(" and calls.close.strip() == ")" \
            and calls.arg_mid.strip() == "=" and not calls.arg_prefix.strip() and not calls.arg_end.strip():
        return replace(calls, body=PYTHON, string_quote=calls.string_quote or '"')
    return calls


def _without_empty_thinking(calls: CallSyntax, reasoning: ReasoningSyntax) -> CallSyntax:
    """A call's opening markers without the empty thinking block the template writes before a
    call it renders (Command R7B): the model writes its own thinking there, or none."""
    empty = re.compile(re.escape(reasoning.start) + r"\s*" + re.escape(reasoning.end))
    return replace(calls, section_start=empty.sub("", calls.section_start), call_start=empty.sub("", calls.call_start),
                   name_prefix=empty.sub("", calls.name_prefix))


def _header(render: FullRender, reasoning: ReasoningSyntax | None, user_marks: set[str]) -> tuple[str, ...]:
    """The assistant's header as the generation prompt writes it (``<|start|>assistant``): markup a
    model may write again between the parts of its reply (gpt-oss between its channels)."""
    prompt = render([USER], None, True, True)
    bare = render([USER], None, False, True)
    if prompt is None or bare is None:
        return ()
    header = prompt[common_prefix(bare, prompt):]
    if reasoning is not None and reasoning.start and reasoning.start in header:
        header = header[:header.find(reasoning.start)]
    header = header.strip()
    return (header,) if header and markers(header) and MARKER.match(header) and header not in user_marks else ()


def _probe_tool() -> dict:
    return {"type": "function", "function": {"name": "PROBE_TOOL_NAME", "description": "probe",
                                             "parameters": {"type": "object", "properties": {}}}}


def _user_markers(render: FullRender) -> set[str]:
    """Markers around a user's turn (role markup)."""
    one = render([USER], None, False, None) or ""
    at = one.find(USER["content"])
    if at < 0:
        return set(markers(one))
    near = markers(one[max(0, at - 80):at + len(USER["content"]) + 80])
    # a marker the template only names in its instructions (Apriel's "after the marker [BEGIN
    # FINAL RESPONSE].") is prose, not the turn's markup
    return {m for m in near if not re.search(re.escape(m) + r"[.,;:]", one)}


def _reasoning(render: FullRender, source: str, user_marks: set[str]) -> ReasoningSyntax | None:
    text, at = "", -1
    for turn in _thinking_turns():
        text = render(turn, None, False, True) or ""
        at = text.find(THINK)
        if at >= 0:
            break
    start = end = ""
    plain_turn = render([USER, {"role": "assistant", "content": TEXT}], None, False, True)
    if at >= 0 and plain_turn is not None:
        start, end = _block_around(plain_turn, text, user_marks)
    if at >= 0 and not end:
        before = last_marker(text[:at])
        after = MARKER.match(text, _skip_ws(text, at + len(THINK)))
        if before is not None and not text[before.end():at].strip() and before.group() not in user_marks \
                and not _header_of(plain_turn, before.group(), after.group() if after is not None else ""):
            start = before.group()
        if after is not None and after.group() not in user_marks:
            end = after.group()
        elif start:
            end = closing_of(start, source)
    on = render([USER], None, True, True)
    off = render([USER], None, True, False)
    default = render([USER], None, True, None)
    if not end and on is not None and off is not None and on != off:
        start, end = _empty_block(diff(on, off)[1], user_marks) or (start, end)
    if not end:
        plain = render([USER, {"role": "assistant", "content": TEXT}], None, False, None) or ""
        header = set(markers(plain[max(0, plain.find(TEXT) - 80):plain.find(TEXT)])) if TEXT in plain else set()
        for prompt in (default, on):
            tail = _tail_marker(prompt or "")
            role_markup = tail in header and not _unclosed_in_turn(plain, prompt or "", tail, source)
            if tail and tail not in user_marks and not role_markup and closing_of(tail, source):
                start, end = tail, closing_of(tail, source)
                break
    if not end:
        return None
    if not start:
        start = opening_of(end, source)
    # thinking is on unless a request turns it off (llama.cpp passes ``enable_thinking`` true)
    prompt = on if on is not None else default
    opened = _opens(prompt, start, end)
    opening = prompt[prompt.rfind(start):] if opened and prompt is not None else ""
    if not start and prompt is not None:  # opened by a sentence of the prompt's (Apriel's "Here are my reasoning steps:")
        said = _prompt_sentence(render, prompt)
        opened, opening = bool(said), said or opening
    return ReasoningSyntax(start, end, opened=opened, opened_off=_opens(off, start, end),
                           switch=on is not None and on != off, opening=opening)


def _header_of(plain: str | None, marker: str, end: str) -> bool:
    """``marker`` is the assistant's header: a plain turn (no thinking) has it before its text,
    and not as the start of an empty thinking block closed by ``end``."""
    if plain is None or TEXT not in plain:
        return False
    at = plain.find(TEXT)
    window = plain[max(0, at - 80):at]
    if marker not in window:
        return False
    return not (end and re.search(re.escape(marker) + r"\s*" + re.escape(end), window))


def _prompt_sentence(render: FullRender, prompt: str) -> str:
    """Text the generation prompt writes after its last marker that no plain assistant turn has:
    the start of the thinking, in words."""
    m = last_marker(prompt)
    said = prompt[m.end():] if m is not None else ""
    plain = render([USER, {"role": "assistant", "content": TEXT}], None, False, None) or ""
    return said if said.strip() and not markers(said) and said.strip() not in plain else ""


def _block_around(plain: str, text: str, user_marks: set[str]) -> tuple[str, str]:
    """The thinking's markers as what a turn with thinking adds to the same turn without it
    (gpt-oss: ``<|channel|>analysis<|message|>`` ... ``<|end|>``, where ``<|message|>`` alone is
    also the user's markup)."""
    at, added, _ = diff(plain, text)
    inner = added.find(THINK)
    if inner < 0:
        return "", ""
    pre, post = added[:inner], added[inner + len(THINK):]
    if not pre.strip() or not markers(pre):
        return "", ""
    if not MARKER.match(pre):  # the difference began inside a marker sequence: take the marker before it
        m = last_marker(text[:at])
        if m is not None and m.end() == at:
            pre = m.group() + pre
    m = MARKER.match(post, _skip_ws(post, 0))
    start = pre.strip()
    if not any(mk not in user_marks for mk in markers(start)) and start in user_marks:
        return "", ""
    return start, m.group() if m is not None else ""


def _thinking_turns() -> list[list[dict]]:
    """Where templates read an assistant turn's thinking: ``reasoning_content`` (llama.cpp's
    field), ``thinking`` (gpt-oss, Mistral), ``reasoning``; some render it only beside a call."""
    call: dict = {"id": "call00001", "type": "function", "function": {"name": "probe", "arguments": {}}}
    out: list[list[dict]] = []
    for key in ("reasoning_content", "thinking", "reasoning"):
        out.append([USER, {"role": "assistant", "content": TEXT, key: THINK}])
    for key in ("reasoning_content", "thinking"):
        out.append([USER, {"role": "assistant", "content": TEXT, key: THINK, "tool_calls": [call]}])
    return out


def _skip_ws(text: str, p: int) -> int:
    while p < len(text) and text[p].isspace():
        p += 1
    return p


def _empty_block(text: str, user_marks: set[str]) -> tuple[str, str] | None:
    """Two markers with only whitespace between them: a closed, empty thinking block."""
    found = [m for m in MARKER.finditer(text) if m.group() not in user_marks]
    for a, b in zip(found, found[1:]):
        if not text[a.end():b.start()].strip():
            return a.group(), b.group()
    if len(found) == 1 and found[0].group().startswith(("</", "<|/", "[/")):
        return "", found[0].group()
    return None


def _unclosed_in_turn(plain: str, prompt: str, marker: str, source: str) -> bool:
    """A plain assistant turn opens ``marker`` before its text and never closes it, and the
    generation prompt writes it after a role header (Nemotron Nano v2's ``<SPECIAL_11>Assistant``
    then ``<think>``): the template keeps the thinking's split in the answer's text, so the
    marker is the thinking's, not role markup (Apertus's ``<|assistant_start|>`` is the header)."""
    at = plain.find(TEXT)
    closing = closing_of(marker, source)
    if at < 0 or marker not in plain[max(0, at - 80):at] or not closing or closing in plain:
        return False
    before = last_marker(prompt[:prompt.rfind(marker)])
    return before is not None and bool(re.search(r"\w", prompt[before.end():prompt.rfind(marker)]))


def _tail_marker(prompt: str) -> str:
    m = last_marker(prompt)
    return m.group() if m is not None and not prompt[m.end():].strip() else ""


def _opens(prompt: str | None, start: str, end: str) -> bool:
    """The generation prompt leaves the thinking block open."""
    if prompt is None or not start:
        return False
    at = prompt.rfind(start)
    return at >= 0 and not prompt[at + len(start):].strip() and end not in prompt[at:]


_PAIRS = (("START", "END"), ("BEGIN", "END"), ("begin", "end"), ("start", "end"), ("open", "close"))


def closing_of(marker: str, source: str) -> str:
    """The marker that closes ``marker`` (``<think>`` -> ``</think>``), if the template has it."""
    candidates = []
    m = re.match(r"^(<\|?|\[|<｜)(.*?)(\|?>|\]|｜>)$", marker)
    if m:
        candidates.append(f"{m.group(1)}/{m.group(2)}{m.group(3)}")
        candidates += [marker.replace(a, b) for a, b in _PAIRS if a in marker]
    return next((c for c in candidates if c != marker and c in source), "")


def opening_of(marker: str, source: str) -> str:
    """The marker that ``marker`` closes (``</think>`` -> ``<think>``), if the template has it."""
    candidates = [marker.replace("/", "", 1)] if "/" in marker else []
    candidates += [marker.replace(b, a) for a, b in _PAIRS if b in marker]
    return next((c for c in candidates if c != marker and c in source), "")


def _content_markers(render: FullRender, plain: str | None, reasoning: ReasoningSyntax | None,
                     user_marks: set[str], tail: str = "", calls: CallSyntax | None = None) -> tuple[str, str]:
    """Markup the model writes before and after its answer text (``tail``: what the generation
    prompt wrote of it)."""
    prompt = render([USER], None, True, None)
    if plain is None or prompt is None or TEXT not in plain:
        return "", ""
    at = plain.find(TEXT)
    written = tail + plain[diff(prompt, plain)[0]:at]
    if reasoning is not None:  # an empty thinking block before the answer is the thinking's markup
        for m in (reasoning.start, reasoning.end):
            written = written.replace(m, "") if m else written
    if _recipient_frame(written.strip(), calls):
        return written.lstrip(), _end_marker(plain, at + len(TEXT))
    written = written.strip()
    if not written or not MARKER.match(written):  # the role header is the prompt's; what is left the model writes
        return "", ""
    return written, _end_marker(plain, at + len(TEXT))


def _end_marker(plain: str, at: int) -> str:
    after = MARKER.match(plain, at)
    return after.group() if after is not None else ""


#: a fixed time for the probes, so that a template that prints the date renders alike each time
_PROBE_TIME = datetime(2026, 1, 2, 12, 0, 0)
_CONTRACTS: dict[tuple[str, str, str], OutputContract] = {}
_CONTRACTS_LOCK = threading.Lock()


def contract_for(source: str | None, bos: str = "", eos: str = "", renderer: ChatRenderer | None = None) -> OutputContract:
    """The output contract of the template ``source`` (None: a model without a template, whose
    calls take the described fallback shape). Cached by the template; safe from any thread.
    ``renderer``: one already made for ``source`` (its capability probes are reused)."""
    if not source:
        return OutputContract()
    key = (source, bos, eos)
    with _CONTRACTS_LOCK:
        hit = _CONTRACTS.get(key)
    if hit is not None:
        return hit
    if renderer is None:
        try:
            renderer = ChatRenderer(source, bos, eos)
        except ChatTemplateError:
            return OutputContract()
    probe = renderer

    def render(messages: list[dict], tools: list[dict] | None, agp: bool, think: bool | None) -> str | None:
        for offered in ((tools, None) if tools else (None,)):  # a template that renders calls, not tools
            try:
                return probe.render(messages, tools=offered, add_generation_prompt=agp, enable_thinking=think,
                                    now=_PROBE_TIME)
            except (ChatTemplateError, ValueError, TypeError, KeyError):
                continue
        return None

    try:
        contract = analyze(render, source)
    except (ValueError, IndexError, RecursionError) as e:  # a template the probes cannot read: plain text
        log.warning("the chat template could not be analysed (%s): tool calls use the described format", e)
        contract = OutputContract()
    with _CONTRACTS_LOCK:
        if len(_CONTRACTS) > 64:
            _CONTRACTS.clear()
        _CONTRACTS[key] = contract
    return contract
