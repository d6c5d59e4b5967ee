"""The internal (OpenAI chat) shapes of tools, shared by the wire formats that translate into them."""

from __future__ import annotations

from typing import Any

from runtime.server.errors import bad_request


def tool_list(tools: Any, message: str) -> list:
    """``tools`` as a list (None: none); anything else is a 400 with ``message``."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise bad_request(message, "tools")
    return tools


def function_tool(name: str, parameters: Any, description: Any = None, strict: Any = None) -> dict:
    """An OpenAI chat function tool; optional fields only when given."""
    fn: dict = {"name": name}
    if isinstance(description, str):
        fn["description"] = description
    if parameters is not None:
        fn["parameters"] = parameters
    if strict is not None:
        fn["strict"] = strict
    return {"type": "function", "function": fn}
