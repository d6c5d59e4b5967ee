"""Print the README's family table: for each of llama.cpp's test templates, what Hearth derives
from it (call syntax, thinking markers) and how many of llama.cpp's parse cases for it Hearth reads
as llama.cpp expects.

    .venv/bin/python scripts/family_table.py > /tmp/families.md
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runtime.chat.contract import JSON, NAME_JSON, PYTHON  # noqa: E402
from runtime.chat.output_parser import parse_all  # noqa: E402
from tests.chat.llama_cases import TEMPLATES, cases, contract, tools_of  # noqa: E402


def _calls(c) -> str:
    s = c.calls
    if s is None:
        return "described in the system message (JSON)"
    first = next((m.strip() for m in (s.section_start, s.call_start, s.name_prefix) if m.strip()), "")
    first = first.replace("|", "\\|").replace("\n", "\\n")
    kind = {JSON: "JSON", NAME_JSON: "name + JSON", PYTHON: "Python call"}.get(s.body, "tagged arguments")
    return f"{kind} `{first[:40]}`" if first else kind


def _reads(case) -> bool:
    k = contract(case.template)
    r = k.reasoning
    in_r = bool(r and (r.opened if case.thinking else r.opened_off))
    text, thought, calls = parse_all(case.input, k, tools_of(case), in_r, None, case.inline)
    got = tuple((c["name"], json.dumps(json.loads(c["arguments"]), sort_keys=True)) for c in calls)
    return text.strip() == case.content.strip() and thought.strip() == case.reasoning.strip() and got == case.calls


def main() -> None:
    total, good = Counter(), Counter()
    for case in cases():
        total[case.template] += 1
        good[case.template] += _reads(case)
    print("| template | tool calls | thinking | llama.cpp's cases read |")
    print("|---|---|---|---|")
    for path in sorted(TEMPLATES.glob("*.jinja")):
        c = contract(path.name)
        r = c.reasoning
        think = f"`{r.start.strip()}` … `{r.end.strip()}`".replace("|", "\\|").replace("\n", "\\n") if r is not None else "—"
        if r is not None and r.opened:
            think += " (opened by the prompt)"
        n = total[path.name]
        print(f"| {path.stem} | {_calls(c)} | {think} | {f'{good[path.name]} / {n}' if n else '—'} |")
    print(f"\n{sum(good.values())} of {sum(total.values())} cases read as llama.cpp expects.")


if __name__ == "__main__":
    main()
