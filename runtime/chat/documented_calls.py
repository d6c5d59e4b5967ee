"""Call formats that a template does not show: where it describes the tools but renders no
calls, the family's documented format, known by how the template lists the tools.

A differential analysis finds nothing in such a template (it renders an assistant turn's calls
as nothing at all), so llama.cpp too recognises these families by their template
(``common/chat.cpp``: LFM2's ``List of tools: <|tool_list_start|>[`` and LFM2.5's
``List of tools: [``). Each entry is what the family's model card and llama.cpp's parser say
the model writes; ``OutputContract.renders_calls`` is then False, so earlier calls reach the
template as text in that format.
"""

from __future__ import annotations

from runtime.chat.contract import PYTHON, CallSyntax

#: (what the rendered tool listing holds, the calls its models write)
DOCUMENTED: tuple[tuple[str, CallSyntax], ...] = (
    # LFM2 and LFM2.5 (Liquid AI): Python calls in a list between special tokens
    ("List of tools: ", CallSyntax(PYTHON, section_start="<|tool_call_start|>[", section_end="]<|tool_call_end|>",
                                   call_sep=", ", name_suffix="(", close=")", arg_mid="=", arg_sep=", ",
                                   string_quote='"')),
)


def documented_calls(tools_prompt: str) -> CallSyntax | None:
    """The documented calls of a template whose prompt with tools is ``tools_prompt``."""
    return next((syntax for listing, syntax in DOCUMENTED if listing in tools_prompt), None)
