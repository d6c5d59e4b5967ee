"""A model's output contract: how it writes reasoning, answer text and tool calls.

Derived once from the chat template when a model loads (``template_analysis.analyze``) and carried
on the model's loaded info; the output parser (``output_parser``) and the call grammar
(``call_grammar``) are both built from it, so a forced call is in the model's own format.

The shapes follow llama.cpp's differential analysis (``common/chat-diff-analyzer.cpp``): a call is
made of literal markers around a body, and the body is one of

- ``json``: one JSON object holding the name and the arguments (``{"name": .., "arguments": {..}}``,
  ``{"tool_name": .., "parameters": ..}``, ``{NAME: {..}}``), optionally a list of them;
- ``name_json``: the name between markers, then the arguments as one JSON object
  (``<function=NAME>{..}</function>``, ``[TOOL_CALLS]NAME[ARGS]{..}``, ``functions.NAME:0<|tool_call_argument_begin|>{..}``);
- ``tagged``: the name between markers, then one marked pair per argument
  (``<parameter=KEY>VALUE</parameter>``, ``<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>``);
- ``python``: a Python call, ``NAME(KEY=VALUE, ...)``, its values Python literals (``True``,
  ``None``, strings in either quote, lists and dicts) or JSON ones (LFM2's
  ``<|tool_call_start|>[get_time(city="Paris")]<|tool_call_end|>``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: in an argument's markers, where the argument's name goes (MiniMax M3's ``<KEY>value</KEY>``)
KEY_SLOT = "\x00key\x00"
#: in a call's markers after its name, where the name is written again (Muse Glimmer's
#: ``to=NAME<|message|><atem:function_calls><atem:invoke name="NAME">``)
NAME_SLOT = "\x00name\x00"

JSON = "json"
NAME_JSON = "name_json"
TAGGED = "tagged"
PYTHON = "python"


@dataclass(slots=True, frozen=True)
class ReasoningSyntax:
    """Thinking markers. ``start`` may be empty where only the end marker closes the thinking
    (the prompt opened it); ``opened``: the generation prompt leaves the thinking block open
    when thinking is on (or by default); ``opened_off``: also when it is off."""

    start: str
    end: str
    opened: bool = False
    opened_off: bool = False
    #: ``enable_thinking`` changes the prompt (the template has a switch)
    switch: bool = False
    #: what the prompt wrote of the block it opened (``<think>\n``), where it opens one
    opening: str = ""


@dataclass(slots=True, frozen=True)
class CallSyntax:
    """How one reply's tool calls are written (see the module doc for the body kinds)."""

    body: str
    #: around all the calls of a reply, and around each call
    section_start: str = ""
    section_end: str = ""
    call_start: str = ""
    call_end: str = ""
    #: between two calls (inside the section)
    call_sep: str = ""
    # -- json bodies
    name_key: str = "name"
    args_key: str = "arguments"
    #: the name is the object's only key, the arguments its value
    name_is_key: bool = False
    #: the calls are one JSON list
    list_wrapped: bool = False
    #: keys written before the name (``{"tool_call_id": "0", "tool_name": ..}``): key -> example value
    extra_keys: tuple[tuple[str, str], ...] = ()
    # -- name_json and tagged bodies
    name_prefix: str = ""
    #: between the name and the arguments (a ``\\d+`` index or a call id may sit inside)
    name_suffix: str = ""
    #: after the arguments
    close: str = ""
    # -- tagged arguments: PREFIX key MID value END, SEP between two
    arg_prefix: str = ""
    arg_mid: str = ""
    arg_end: str = ""
    arg_sep: str = ""
    #: the middle marker before a value that is not a string, where it differs (DeepSeek V3.2's
    #: ``string="false"``); the value is then JSON
    arg_mid_json: str = ""
    #: the JSON-like body of Gemma 4 (``{key:<|"|>text<|"|>,n:1}``): strings are quoted with it
    string_quote: str = ""
    #: the template writes string values raw and other values as JSON (Qwen3-Coder); False: all JSON
    raw_strings: bool = True
    #: where a call id sits in the markers (its literal placeholder in ``name_suffix`` / ``name_prefix``)
    id_in_markers: bool = False

    @property
    def trigger(self) -> str:
        """The first marker of a reply's calls (where a lazily applied grammar starts)."""
        return self.section_start or self.call_start or self.name_prefix


@dataclass(slots=True, frozen=True)
class OutputContract:
    """What the service knows of a model's output. ``calls`` None: the template renders no tool
    calls (the tools are then described in the system message, in the ``json`` fallback shape);
    ``reasoning`` None: no thinking markers."""

    calls: CallSyntax | None = None
    reasoning: ReasoningSyntax | None = None
    #: answer text is written between these (gpt-oss's final channel, Command R's response markers)
    content_start: str = ""
    content_end: str = ""
    #: the template renders ``tools`` itself
    native_tools: bool = False
    #: the template renders a call's arguments given as an object
    object_arguments: bool = True
    #: markup the model writes between parts that is not content (channel headers)
    noise: tuple[str, ...] = field(default_factory=tuple)
    #: the template renders earlier calls itself; False where ``calls`` is the family's documented
    #: format and the template renders none (LFM2): earlier calls reach it as text in that format
    renders_calls: bool = True
    #: what the generation prompt wrote of the reply's first header (Functionary v3.2's ``>>>``,
    #: before the recipient the model names): the reply is read as going on from it, as
    #: llama.cpp reads the generation prompt and the reply as one text
    prompt_tail: str = ""

    @property
    def tools(self) -> bool:
        return self.calls is not None


#: the calls a template that renders none is asked for, described in the system message
FALLBACK_CALLS = CallSyntax(JSON, section_start='{"tool_calls": [', section_end="]}", list_wrapped=False, call_sep=", ")
