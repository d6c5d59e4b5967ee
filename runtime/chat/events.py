"""A model's reply as typed events: answer text, reasoning, tool calls.

The contract (every wire format consumes exactly these events, in order):

- ``TextDelta(text)``: answer text; never contains tool-call or reasoning markup.
- ``ReasoningDelta(text)``: thinking, without its markers.
- ``ToolCallStart(index, id, name)``: a tool call begins; ``index`` counts calls from 0 in the
  reply, ``id`` is unique (the model's own where it writes one), ``name`` the function's name.
- ``ToolCallArgsDelta(index, fragment)``: the next piece of that call's arguments, JSON text; the
  concatenation of a call's fragments is one JSON object.
- ``ToolCallEnd(index, complete)``: the call is over; ``complete``: its arguments parse (False only
  when the reply was cut inside a call whose start was already sent).

A call's Start comes before its ArgsDeltas and its End; calls do not interleave.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass


@dataclass(slots=True)
class TextDelta:
    text: str


@dataclass(slots=True)
class ReasoningDelta:
    text: str


@dataclass(slots=True)
class ToolCallStart:
    index: int
    id: str
    name: str


@dataclass(slots=True)
class ToolCallArgsDelta:
    index: int
    fragment: str


@dataclass(slots=True)
class ToolCallEnd:
    index: int
    complete: bool = True


Event = TextDelta | ReasoningDelta | ToolCallStart | ToolCallArgsDelta | ToolCallEnd


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"
