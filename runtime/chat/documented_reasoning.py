"""Thinking markers that a template does not render but tells the model to write.

Some templates render no thinking at all (an assistant turn's ``reasoning_content`` is dropped,
the generation prompt opens no block), yet their system prompt asks the model to think between
markers of its own (IBM Granite 3.3, with its ``thinking`` switch: "Write your thoughts between
<think></think> and write your response between <response></response>"). A differential analysis
finds nothing there, so llama.cpp reads such a template by its instruction too
(``common/chat-diff-analyzer.cpp``, its Granite 3.3 patch: reasoning between ``<think>`` and
``</think>``, the answer optionally between ``<response>`` and ``</response>``).

This reads the instruction, not the template's name: any template that tells the model to write
its thoughts (and its answer) between a pair of tags it names.
"""

from __future__ import annotations

import re

from runtime.chat.contract import ReasoningSyntax

_PAIR = r"(?:between|in|inside|within)\s+(<[\w\-]+>)\s*(?:and\s*)?(</[\w\-]+>)"
_THOUGHTS = re.compile(r"(?i)\b(?:thoughts|thinking|reasoning)\b[^.<]{0,40}?\b" + _PAIR)
_ANSWER = re.compile(r"(?i)\b(?:response|answer)\b[^.<]{0,40}?\b" + _PAIR)


def _pair(pattern: re.Pattern, source: str) -> tuple[str, str] | None:
    m = pattern.search(source)
    if m is None or m.group(2) != m.group(1)[:1] + "/" + m.group(1)[1:]:
        return None  # the closing tag must close the opening one
    return m.group(1), m.group(2)


def documented_reasoning(source: str) -> tuple[ReasoningSyntax, tuple[str, ...]] | None:
    """The thinking markers the template ``source`` tells its model to write, and the markers
    it tells it to put around its answer (markup, not answer text); None where it names none."""
    thoughts = _pair(_THOUGHTS, source)
    if thoughts is None:
        return None
    answer = _pair(_ANSWER, source[source.find(thoughts[1]):])
    return ReasoningSyntax(*thoughts), answer or ()
