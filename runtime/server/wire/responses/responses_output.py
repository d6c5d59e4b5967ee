"""The output items of a Responses reply, built from the typed output events.

One builder serves both modes: streamed, each change is also an event (``emit``); whole, the
events go nowhere and only the items are kept. Items come in the order the model wrote them:
``reasoning`` (``response.reasoning_text.delta`` / ``.done``), ``message`` (``response.content_part.added``,
``response.output_text.delta`` / ``.done``, ``response.content_part.done``) and ``function_call``
(``response.function_call_arguments.delta`` / ``.done``), each between ``response.output_item.added``
and ``response.output_item.done``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

from runtime.chat.events import ReasoningDelta, TextDelta, ToolCallArgsDelta, ToolCallEnd, ToolCallStart


async def _quiet(kind: str, **fields) -> None:
    return None


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _no_logprobs() -> list[dict]:
    return []


class OutputItems:
    """``tool_kinds``: how calls of non-plain tools come back (``responses_schemas``);
    ``logprobs``: the logprobs of the tokens read since its last call, in the wire's shape."""

    def __init__(self, emit=_quiet, tool_kinds: dict[str, tuple[str, str]] | None = None,
                 logprobs: Callable[[], list[dict]] = _no_logprobs) -> None:
        self.emit = emit
        self.tool_kinds = tool_kinds or {}
        self.logprobs = logprobs
        self.items: list[dict] = []  # finished items
        self.item: dict | None = None  # the open one
        self.buf = ""  # its text or arguments so far
        self.text_logprobs: list[dict] = []  # of the open message

    @property
    def index(self) -> int:
        return len(self.items)

    def _where(self) -> dict:
        assert self.item is not None  # an event of the open item
        return {"item_id": self.item["id"], "output_index": self.index}

    async def open(self, item: dict) -> None:
        await self.close()
        self.item, self.buf = item, ""
        await self.emit("response.output_item.added", output_index=self.index, item=dict(item))
        if item["type"] == "message":
            await self.emit("response.content_part.added", **self._where(), content_index=0,
                            part={"type": "output_text", "text": "", "annotations": []})

    async def close(self, status: str = "completed") -> None:
        item = self.item
        if item is None:
            return
        kind, where, text = item["type"], self._where(), self.buf
        if kind == "message":
            lps, self.text_logprobs = self.text_logprobs, []
            await self.emit("response.output_text.done", **where, content_index=0, text=text, logprobs=lps)
            part = {"type": "output_text", "text": text, "annotations": []}
            await self.emit("response.content_part.done", **where, content_index=0, part=part)
            item["content"] = [{**part, "logprobs": lps}]
        elif kind == "reasoning":
            await self.emit("response.reasoning_text.done", **where, content_index=0, text=text)
            item["content"] = [{"type": "reasoning_text", "text": text}]
        elif kind == "custom_tool_call":
            try:
                item["input"] = json.loads(text).get("input", "")
            except (ValueError, AttributeError, RecursionError):
                item["input"] = text
            await self.emit("response.custom_tool_call_input.done", **where, input=item["input"])
        else:
            await self.emit("response.function_call_arguments.done", **where, name=item["name"], arguments=text)
            item["arguments"] = text
        item["status"] = status
        await self.emit("response.output_item.done", output_index=self.index, item=item)
        self.items.append(item)
        self.item = None

    async def add(self, e) -> None:
        kind = self.item["type"] if self.item is not None else None
        if isinstance(e, TextDelta) and e.text:
            if kind != "message":
                await self.open_message()
            self.buf += e.text
            lps = self.logprobs()
            self.text_logprobs += lps
            await self.emit("response.output_text.delta", **self._where(), content_index=0, delta=e.text, logprobs=lps)
        elif isinstance(e, ReasoningDelta) and e.text:
            if kind != "reasoning":
                await self.open({"id": _new_id("rs"), "type": "reasoning", "summary": [], "content": [],
                                 "status": "in_progress"})
            self.buf += e.text
            self.logprobs()  # a reasoning token's logprobs have no place in the Responses format
            await self.emit("response.reasoning_text.delta", **self._where(), content_index=0, delta=e.text)
        elif isinstance(e, ToolCallStart):
            self.logprobs()
            how, namespace = self.tool_kinds.get(e.name, ("function", ""))
            if how == "custom":
                await self.open({"id": _new_id("ctc"), "type": "custom_tool_call", "call_id": e.id, "name": e.name,
                                 "input": "", "status": "in_progress"})
                return
            item = {"id": _new_id("fc"), "type": "function_call", "call_id": e.id, "name": e.name,
                    "arguments": "", "status": "in_progress"}
            if how == "namespace":
                item["namespace"] = namespace
            await self.open(item)
        elif isinstance(e, ToolCallArgsDelta):
            self.buf += e.fragment
            if kind == "function_call":  # a custom tool's input is sent whole, when the call ends
                await self.emit("response.function_call_arguments.delta", **self._where(), delta=e.fragment)
        elif isinstance(e, ToolCallEnd):
            await self.close("completed" if e.complete else "incomplete")

    async def open_message(self) -> None:
        await self.open({"id": _new_id("msg"), "type": "message", "status": "in_progress", "role": "assistant",
                         "content": []})

    async def finish(self, status: str) -> list[dict]:
        """Close the open item (with the reply's status); a reply with no output is one empty message."""
        if self.item is None and not self.items:
            await self.open_message()
        await self.close(status)
        return self.items

    @property
    def calls(self) -> list[dict]:
        return [i for i in self.items if i["type"] in ("function_call", "custom_tool_call")]

    def text(self, kind: str) -> str:
        key = "output_text" if kind == "message" else "reasoning_text"
        return "".join(p["text"] for i in self.items if i["type"] == kind for p in i["content"] if p["type"] == key)
