"""Reasoning switches as the wire formats send them, on the internal scale: thinking on or off
(None: the template's default) and an effort of low, medium or high.

An effort turns thinking on (``none`` and ``minimal`` turn it off) unless the request says
otherwise; efforts past the scale (``xhigh``, ``max``) are its top.
"""

from __future__ import annotations

from typing import Any

from runtime.server.errors import bad_request

EFFORTS = ("low", "medium", "high")
_OFF = ("none", "minimal")
_TOP = ("xhigh", "max")


def reasoning(think: bool | None, effort: str | None) -> tuple[bool | None, str | None]:
    """(think, effort) of a request that sent ``think`` and ``effort`` (already checked by its wire)."""
    if effort in _TOP:
        effort = "high"
    if effort in _OFF and think is None:
        think = False
    elif effort in EFFORTS and think is None:
        think = True
    return think, effort if effort in EFFORTS else None


def parse_reasoning(body: dict) -> tuple[bool | None, str | None]:
    """OpenAI chat's ``reasoning_effort`` and the ``think`` (Ollama's, which may be an effort) /
    ``enable_thinking`` switches."""
    effort = body.get("reasoning_effort")
    if effort is not None and effort not in EFFORTS + _OFF:
        raise bad_request("'reasoning_effort' must be one of none, minimal, low, medium, high", "reasoning_effort")
    think: Any = body.get("think", body.get("enable_thinking"))
    if think in EFFORTS:
        effort, think = think, True
    elif think is not None and not isinstance(think, bool):
        raise bad_request("'think' must be true, false, \"low\", \"medium\" or \"high\"", "think")
    return reasoning(think, effort)
