"""Metadata that agent clients put into the prompt text but that is not meant for the model.

A prefix cache reuses a prompt only up to its first changed token, so a line that changes on
every request at the very top of the system prompt makes a coding agent's 20k-token
instructions a full re-prefill each turn. Such lines are removed before the prompt is rendered:

- Claude Code starts its system prompt with ``x-anthropic-billing-header: cc_version=...;
  cc_entrypoint=...;`` (a separate text block, or the first line of the system text); its value
  changes between versions and requests, and it tells the model nothing. ``hearth launch
  claude`` also sets ``CLAUDE_CODE_ATTRIBUTION_HEADER=0`` so the client leaves it out.
"""

from __future__ import annotations

#: prefixes of lines that are client metadata, removed wherever they start a line of a system prompt
METADATA_LINE_PREFIXES = ("x-anthropic-billing-header:",)


def is_metadata_line(line: str) -> bool:
    return line.lstrip().lower().startswith(METADATA_LINE_PREFIXES)


def strip_metadata(text: str) -> str:
    """``text`` without its client-metadata lines (unchanged when it has none: the common case
    costs one scan for the prefixes)."""
    if not any(p in text.lower() for p in METADATA_LINE_PREFIXES):
        return text
    return "\n".join(line for line in text.split("\n") if not is_metadata_line(line)).lstrip("\n")
