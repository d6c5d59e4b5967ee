"""Per-family message adjustments, as llama.cpp's specialized handlers make them.

Some templates read a conversation in a shape of their own: gpt-oss and LFM2 read the
reasoning from ``thinking``; Ministral 3 and Devstral read the reasoning and the text of
system and assistant messages as content blocks; Gemma 4's first templates read tool
results inside the assistant turn (``tool_responses``); DeepSeek V4 reads the results of
one turn in the order of its calls; StepFun 3.5 reads trimmed text. llama.cpp recognises
each by its template's text (``common_chat_try_specialized_template`` in
``common/chat.cpp``, the handlers in ``common/parsers/``), and so does this module.

Where llama.cpp drops a message's text on the way (gpt-oss: an assistant message's content
beside its reasoning and calls; Gemma 4: the text of an assistant message with calls), it is
kept here: in the reasoning, which is where gpt-oss renders such text, and in the merged turn.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

Adjust = Callable[[list[dict]], list[dict]]


def family_adjustments(source: str) -> list[Adjust]:
    """The adjustments the template with this text needs, in the order they apply."""
    found: list[Adjust] = []
    if "You have access to the following functions in JSONSchema format" in source:
        found.append(trim_content)  # StepFun 3.5: whitespace drives it into reasoning loops
    if "[SYSTEM_PROMPT]" in source and "[TOOL_CALLS]" in source and "[ARGS]" in source \
            and "[CALL_ID]" not in source:
        found.append(reasoning_as_blocks)  # Ministral 3, Devstral
    elif "<|channel|>" in source:
        found.append(gpt_oss_thinking)
    elif _is_lfm2(source):
        found.append(reasoning_as_thinking)
    elif "dsml_token" in source and "DSML" in source and "function_calls" not in source \
            and "tool_calls" in source:
        found.append(results_in_call_order)  # DeepSeek V4 (V3.2 names its block function_calls)
    elif "'<|tool_call>call:'" in source and "{#- OpenAI Chat Completions:" not in source:
        found.append(tool_responses_in_turn)  # Gemma 4's first templates
    return found


def _is_lfm2(source: str) -> bool:
    lists_tools = "<|tool_list_start|>" in source and "<|tool_list_end|>" in source
    return lists_tools or "List of tools: [" in source


def trim_content(messages: list[dict]) -> list[dict]:
    out = []
    for m in messages:
        m = dict(m)
        if isinstance(m.get("content"), str):
            m["content"] = m["content"].strip()
        elif isinstance(m.get("content"), list):
            m["content"] = [{**p, "text": p["text"].strip()} if p.get("type") == "text" else p for p in m["content"]]
        if isinstance(m.get("reasoning_content"), str):
            m["reasoning_content"] = m["reasoning_content"].strip()
        out.append(m)
    return out


def reasoning_as_blocks(messages: list[dict]) -> list[dict]:
    """System and assistant content as blocks: ``thinking`` (the reasoning), then the text."""
    out = []
    for m in messages:
        if m.get("role") not in ("system", "assistant"):
            out.append(m)
            continue
        blocks: list[dict] = []
        if isinstance(m.get("reasoning_content"), str):
            blocks.append({"type": "thinking", "thinking": m["reasoning_content"]})
        content = m.get("content")
        if isinstance(content, str):
            blocks.append({"type": "text", "text": content})
        elif isinstance(content, list):
            blocks.extend(content)
        out.append({k: v for k, v in m.items() if k != "reasoning_content"} | {"content": blocks})
    return out


def reasoning_as_thinking(messages: list[dict]) -> list[dict]:
    return [{**m, "thinking": m["reasoning_content"]} if isinstance(m.get("reasoning_content"), str) else m
            for m in messages]


def gpt_oss_thinking(messages: list[dict]) -> list[dict]:
    """The reasoning in ``thinking``. The template refuses content beside thinking in a turn
    with calls and renders such content as analysis, so it joins the thinking there."""
    out = []
    for m in messages:
        if isinstance(m.get("reasoning_content"), str):
            m = {**m, "thinking": m["reasoning_content"]}
            if m.get("tool_calls"):
                text = m.get("content") if isinstance(m.get("content"), str) else ""
                m["thinking"] = f"{m['thinking']}\n\n{text}" if text else m["thinking"]
                m.pop("content", None)
        out.append(m)
    return out


def results_in_call_order(messages: list[dict]) -> list[dict]:
    """Tool results of one run of user/tool messages ordered as the preceding turn's calls."""
    out = list(messages)
    order: dict[str, int] = {}
    i = 0
    while i < len(out):
        m = out[i]
        if m.get("role") == "assistant" and m.get("tool_calls"):
            order = {str(c["id"]): k for k, c in enumerate(m["tool_calls"]) if c.get("id")}
            i += 1
            continue
        if m.get("role") not in ("user", "tool"):
            i += 1
            continue
        end = i
        while end < len(out) and out[end].get("role") in ("user", "tool"):
            end += 1
        positions = [k for k in range(i, end) if out[k].get("role") == "tool"]
        if len(positions) > 1 and order:
            results = sorted((out[k] for k in positions), key=lambda r: order.get(str(r.get("tool_call_id")), 0))
            for k, r in zip(positions, results):
                out[k] = r
        i = end
    return out


def tool_responses_in_turn(messages: list[dict]) -> list[dict]:
    """An assistant turn with calls, the tool results after it and the assistant's answer
    after those, as one assistant message with ``tool_responses``."""
    out: list[dict] = []
    i = 0
    while i < len(messages):
        m = messages[i]
        if m.get("role") != "assistant" or not m.get("tool_calls"):
            out.append(m)
            i += 1
            continue
        turn: dict[str, Any] = {"role": "assistant", "tool_calls": m["tool_calls"]}
        if isinstance(m.get("reasoning_content"), str):
            turn["reasoning_content"] = m["reasoning_content"]
        i += 1
        responses: list[dict] = []
        while i < len(messages) and messages[i].get("role") == "tool":
            responses.append(_tool_response(messages[i], m["tool_calls"], len(responses)))
            i += 1
        if responses:
            turn["tool_responses"] = responses
        own = m.get("content")
        if _has_content(own):
            turn["content"] = own
        elif i < len(messages) and messages[i].get("role") == "assistant" and not messages[i].get("tool_calls") \
                and _has_content(messages[i].get("content")):
            turn["content"] = messages[i]["content"]
            i += 1
        out.append(turn)
    return out


def _has_content(content: Any) -> bool:
    return bool(content) and isinstance(content, (str, list))


def _tool_response(m: dict, calls: list[dict], index: int) -> dict:
    content = m.get("content")
    response: Any = content
    if isinstance(content, str):
        try:
            response = json.loads(content)
        except (ValueError, RecursionError):  # not JSON (or nested past Python's limit): the text itself
            response = content
    name = calls[index]["function"].get("name", "") if index < len(calls) else ""
    return {"name": name or m.get("tool_call_id", ""), "response": response}
