"""llama.cpp's chat parser cases (``llama_chat_cases.json``, ported from its ``tests/test-chat.cpp``
by ``scripts/port_chat_cases.py``), run through Hearth's template analysis and output parser."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from runtime.chat.contract import OutputContract
from runtime.chat.template_analysis import contract_for

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"


@cache
def reference() -> dict:
    return json.loads((HERE / "llama_chat_cases.json").read_text())


@dataclass(slots=True, frozen=True)
class Case:
    template: str
    line: int
    input: str
    tools: tuple[str, ...]
    thinking: bool
    #: reasoning format "none": thinking stays in the answer text, markers included
    inline: bool
    content: str
    reasoning: str
    calls: tuple[tuple[str, str], ...]  # (name, arguments as canonical JSON)

    @property
    def key(self) -> str:
        return f"{self.template.removesuffix('.jinja')}:{self.line}"


def cases() -> list[Case]:
    """The whole-reply cases (partial replies, continued messages and response formats aside)."""
    out, seen = [], set()
    for c in reference()["cases"]:
        if c.get("expect_fail") or c.get("continue_final_message") or c.get("json_schema") or c.get("is_partial"):
            continue
        e = c["expect"]
        case = Case(c["template"], c["line"], c["input"], tuple(c["tools"] or ()),
                    c["enable_thinking"] if c["enable_thinking"] is not None else True,
                    c["reasoning_format"] in (None, "none"), e["content"], e["reasoning_content"],
                    tuple((t["name"], json.dumps(t["arguments"], sort_keys=True)) for t in e["tool_calls"]))
        n = 1
        while (case.key, n) in seen:  # several cases on one line (a helper run for many inputs)
            n += 1
        seen.add((case.key, n))
        out.append(case)
    return out


def tools_of(case: Case) -> list[dict] | None:
    return [reference()["tools"][n] for n in case.tools] or None


@cache
def contract(template: str) -> OutputContract:
    return contract_for((TEMPLATES / template).read_text(), "<s>", "</s>")
