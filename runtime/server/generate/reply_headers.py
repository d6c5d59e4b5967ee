"""Hearth's own headers on a generation's reply, written as the response is prepared
(``on_response_prepare``): what the service changed of the request to serve it.

- ``x-hearth-relaxed-tools``: the tools whose schemas the grammar could not enforce whole
  (``tool_relax``), tool by tool;
- ``x-hearth-dropped-messages``: how many messages of the conversation its context-overflow policy
  left out to fit the model's context (``runtime.engine.context_overflow``).
"""

from __future__ import annotations

from aiohttp import web

RELAXED_TOOLS = "hearth.relaxed_tools"
RELAXED_HEADER = "x-hearth-relaxed-tools"
DROPPED_MESSAGES = "hearth.dropped_messages"
DROPPED_HEADER = "x-hearth-dropped-messages"


async def reply_headers(request: web.Request, response: web.StreamResponse) -> None:
    names = request.get(RELAXED_TOOLS)
    if names:
        response.headers[RELAXED_HEADER] = ", ".join(names)
    dropped = request.get(DROPPED_MESSAGES)
    if dropped:
        response.headers[DROPPED_HEADER] = str(dropped)
